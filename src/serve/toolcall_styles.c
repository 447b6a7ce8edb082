/* toolcall_styles — the region bodies of the call styles that are not a JSON region
 * (engine/text/family.h, docs/tools.md "Call styles"), converted to a name and JSON arguments.
 *
 * CALL_DICT:   PREFIX NAME{key:value,...}  — keys bare (or between quote markers), strings
 *              between quote markers taken raw (no escapes exist), numbers in JSON syntax kept as
 *              written, true/false/null (and Python's True/False/None, which the template's
 *              `{{ value }}` would print) as JSON literals, nested {...} and [...].
 * XML_PARAMS:  FN_OPEN NAME> (PARAM_OPEN KEY>\nVALUE\nPARAM_CLOSE)* FN_CLOSE  — the template
 *              writes a string value raw and any other value as JSON (or Python's str()), so a
 *              value's JSON type comes from the declared tool's schema for that parameter: a
 *              parameter typed "string" keeps the raw text; any other parses as JSON where it
 *              can (True/False/None as the literals), else is a string.
 *
 * The arguments come out as one JSON object text `{"k": v, "k2": v2}` (json.dumps' separators,
 * non-ASCII raw, numbers as the model wrote them). Anything that is not exactly that shape (a
 * duplicate key, invalid UTF-8 in a string, an unterminated string, text after the call) is not
 * a call: the scanner then emits the region as text. Pure functions; any thread. */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "serve/toolcall.h"

#define DICT_MAX_DEPTH 64

static bool ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* s[0..n) as a JSON string literal (jansson's escapes: " \\ and controls; non-ASCII raw).
 * -1 for invalid UTF-8, an embedded NUL or OOM. */
static int put_json_str(struct buf *out, const char *s, size_t n)
{
    if (memchr(s, 0, n)) return -1;
    json_t *j = json_stringn(s, n);
    if (!j) return -1;
    char *t = json_dumps(j, JSON_ENCODE_ANY);
    json_decref(j);
    if (!t) return -1;
    int rc = buf_puts(out, t);
    free(t);
    return rc;
}

/* A JSON number exactly (RFC 8259 grammar). */
static bool is_json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return false;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return false;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return false;
    }
    return i == n;
}

static bool tok_is(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && !memcmp(s, lit, n);
}

/* A bare scalar as JSON: numbers verbatim, the literals (either spelling). NULL if none. */
static const char *scalar_json(const char *s, size_t n)
{
    if (tok_is(s, n, "true") || tok_is(s, n, "True")) return "true";
    if (tok_is(s, n, "false") || tok_is(s, n, "False")) return "false";
    if (tok_is(s, n, "null") || tok_is(s, n, "None")) return "null";
    return is_json_number(s, n) ? "" : NULL; /* "": copy the text */
}

/* ---- CALL_DICT ---- */

struct dp {
    const char *s;
    size_t n, i;
    const char *q; /* quote marker */
    size_t nq;
    struct buf *out;
};

static void dp_ws(struct dp *p)
{
    while (p->i < p->n && ws(p->s[p->i]))
        p->i++;
}

static bool dp_at(const struct dp *p, const char *lit, size_t l)
{
    return p->n - p->i >= l && !memcmp(p->s + p->i, lit, l);
}

/* At a quote marker: the raw text up to the next one. Sets *a, *len; -1 if unterminated. */
static int dp_quoted(struct dp *p, const char **a, size_t *len)
{
    p->i += p->nq;
    const char *e = memmem(p->s + p->i, p->n - p->i, p->q, p->nq);
    if (!e) return -1;
    *a = p->s + p->i;
    *len = (size_t)(e - *a);
    p->i = (size_t)(e - p->s) + p->nq;
    return 0;
}

static int dp_value(struct dp *p, int depth);

static int dp_dict(struct dp *p, int depth)
{
    p->i++; /* '{' */
    dp_ws(p);
    if (buf_puts(p->out, "{") < 0) return -1;
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return buf_puts(p->out, "}");
    }
    json_t *seen = json_object();
    if (!seen) return -1;
    int rc = -1;
    for (bool first = true;; first = false) {
        const char *k;
        size_t kl;
        if (dp_at(p, p->q, p->nq)) {
            if (dp_quoted(p, &k, &kl) < 0) goto out;
        } else {
            k = p->s + p->i;
            while (p->i < p->n && !strchr(":{}[],", p->s[p->i]) && !dp_at(p, p->q, p->nq))
                p->i++;
            kl = (size_t)(p->s + p->i - k);
            if (kl == 0 || ws(k[0])) goto out;
        }
        if (p->i >= p->n || p->s[p->i] != ':') goto out;
        p->i++;
        dp_ws(p);
        /* a key twice is not an object JSON can carry faithfully */
        char *key = strndup(k, kl);
        if (!key) goto out;
        bool dup = json_object_get(seen, key) != NULL;
        int bad = dup || json_object_set_new(seen, key, json_null()) < 0;
        free(key);
        if (bad) goto out;
        if ((!first && buf_puts(p->out, ", ") < 0) || put_json_str(p->out, k, kl) < 0 ||
            buf_puts(p->out, ": ") < 0 || dp_value(p, depth + 1) < 0)
            goto out;
        dp_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            dp_ws(p);
            continue;
        }
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            rc = buf_puts(p->out, "}");
        }
        goto out;
    }
out:
    json_decref(seen);
    return rc;
}

static int dp_list(struct dp *p, int depth)
{
    p->i++; /* '[' */
    dp_ws(p);
    if (buf_puts(p->out, "[") < 0) return -1;
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return buf_puts(p->out, "]");
    }
    for (bool first = true;; first = false) {
        if ((!first && buf_puts(p->out, ", ") < 0) || dp_value(p, depth + 1) < 0) return -1;
        dp_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            dp_ws(p);
            continue;
        }
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
            return buf_puts(p->out, "]");
        }
        return -1;
    }
}

static int dp_value(struct dp *p, int depth)
{
    if (depth > DICT_MAX_DEPTH || p->i >= p->n) return -1;
    if (dp_at(p, p->q, p->nq)) {
        const char *a;
        size_t l;
        return dp_quoted(p, &a, &l) < 0 ? -1 : put_json_str(p->out, a, l);
    }
    if (p->s[p->i] == '{') return dp_dict(p, depth);
    if (p->s[p->i] == '[') return dp_list(p, depth);
    size_t a = p->i;
    while (p->i < p->n && !ws(p->s[p->i]) && !strchr(",}]", p->s[p->i]))
        p->i++;
    const char *lit = scalar_json(p->s + a, p->i - a);
    if (!lit) return -1;
    return lit[0] ? buf_puts(p->out, lit) : buf_append(p->out, p->s + a, p->i - a);
}

int toolcall_parse_dict(const char *body, size_t n, const struct family_tool_syntax *syn,
                        char **name, struct buf *args)
{
    *name = NULL;
    buf_reset(args);
    struct dp p = {.s = body, .n = n, .q = syn->quote, .nq = strlen(syn->quote), .out = args};
    size_t np = strlen(syn->prefix);
    dp_ws(&p);
    if (!dp_at(&p, syn->prefix, np)) return -1;
    p.i += np;
    size_t a = p.i;
    while (p.i < n && body[p.i] != '{' && !ws(body[p.i]))
        p.i++;
    if (p.i == a || p.i >= n || body[p.i] != '{') return -1;
    size_t nl = p.i - a;
    if (memchr(body + a, 0, nl)) return -1;
    if (dp_dict(&p, 0) < 0) goto bad;
    dp_ws(&p);
    if (p.i != n) goto bad;
    if (!(*name = strndup(body + a, nl))) goto bad;
    return 0;
bad:
    buf_reset(args);
    return -1;
}

/* ---- XML_PARAMS ---- */

/* The declared schema of parameter key of tool name in tools (OpenAI-shaped), or NULL. */
static const json_t *param_schema(const json_t *tools, const char *name, const char *key)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const json_t *nm = json_object_get(fn, "name");
        if (!json_is_string(nm) || strcmp(json_string_value(nm), name)) continue;
        const json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        return json_object_get(props, key);
    }
    return NULL;
}

static bool type_has(const json_t *type, const char *t)
{
    if (json_is_string(type)) return !strcmp(json_string_value(type), t);
    size_t i;
    const json_t *x;
    json_array_foreach(type, i, x) {
        if (json_is_string(x) && !strcmp(json_string_value(x), t)) return true;
    }
    return false;
}

/* The JSON type name of parsed value j. */
static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* One parameter value v[0..n) as JSON, by its schema (may be NULL): a parameter typed "string"
 * is the raw text; otherwise the text read as JSON (or True/False/None) where that gives a value
 * of a declared type (any type when the schema names none; an integer also fits "number"), else
 * the raw text as a string. A JSON string literal counts only when the schema names no type (the
 * template writes a string raw wherever "string" is declared). */
static int xml_value(struct buf *out, const json_t *schema, const char *v, size_t n)
{
    const json_t *type = json_object_get(schema, "type");
    if (json_is_string(type) && !strcmp(json_string_value(type), "string"))
        return put_json_str(out, v, n);
    const char *lit = NULL, *got = NULL;
    if (tok_is(v, n, "true") || tok_is(v, n, "True")) lit = "true";
    else if (tok_is(v, n, "false") || tok_is(v, n, "False")) lit = "false";
    else if (tok_is(v, n, "null") || tok_is(v, n, "None")) lit = "null";
    if (lit) {
        got = strcmp(lit, "null") ? "boolean" : "null";
    } else if (n && !memchr(v, 0, n)) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        got = j ? json_type_name(j) : NULL;
        json_decref(j);
    }
    bool ok = got && (!type || (strcmp(got, "string") &&
                                (type_has(type, got) ||
                                 (!strcmp(got, "integer") && type_has(type, "number")))));
    if (!ok) return put_json_str(out, v, n);
    return lit ? buf_puts(out, lit) : buf_append(out, v, n);
}

int toolcall_parse_xml(const char *body, size_t n, const struct family_tool_syntax *syn,
                       const json_t *tools, char **name, struct buf *args)
{
    *name = NULL;
    buf_reset(args);
    size_t fo = strlen(syn->fn_open), fc = strlen(syn->fn_close);
    size_t po = strlen(syn->param_open), pc = strlen(syn->param_close);
    size_t i = 0;
    json_t *seen = json_object();
    if (!seen) return -1;
    while (i < n && ws(body[i])) i++;
    if (n - i < fo || memcmp(body + i, syn->fn_open, fo)) goto bad;
    i += fo;
    size_t a = i;
    while (i < n && body[i] != '>' && body[i] != '\n') i++;
    if (i == a || i >= n || body[i] != '>' || memchr(body + a, 0, i - a)) goto bad;
    if (!(*name = strndup(body + a, i - a))) goto bad;
    i++;
    if (buf_puts(args, "{") < 0) goto bad;
    for (bool first = true;; first = false) {
        while (i < n && ws(body[i])) i++;
        if (n - i >= fc && !memcmp(body + i, syn->fn_close, fc)) {
            i += fc;
            while (i < n && ws(body[i])) i++;
            if (i != n || buf_puts(args, "}") < 0) goto bad;
            break;
        }
        if (n - i < po || memcmp(body + i, syn->param_open, po)) goto bad;
        i += po;
        size_t k = i;
        while (i < n && body[i] != '>' && body[i] != '\n') i++;
        if (i == k || i >= n || body[i] != '>') goto bad;
        char *key = strndup(body + k, i - k);
        if (!key || memchr(body + k, 0, i - k)) {
            free(key);
            goto bad;
        }
        i++;
        /* the template writes KEY>\nVALUE\nCLOSE: one newline each side is layout */
        if (i < n && body[i] == '\n') i++;
        const char *e = memmem(body + i, n - i, syn->param_close, pc);
        size_t vl = e ? (size_t)(e - (body + i)) : 0;
        if (e && vl > 0 && body[i + vl - 1] == '\n') vl--;
        bool dup = json_object_get(seen, key) != NULL;
        int bad = !e || dup || json_object_set_new(seen, key, json_null()) < 0 ||
                  (!first && buf_puts(args, ", ") < 0) || put_json_str(args, key, strlen(key)) < 0 ||
                  buf_puts(args, ": ") < 0 ||
                  xml_value(args, param_schema(tools, *name, key), body + i, vl) < 0;
        free(key);
        if (bad) goto bad;
        i = (size_t)(e - body) + pc;
    }
    json_decref(seen);
    return 0;
bad:
    json_decref(seen);
    free(*name);
    *name = NULL;
    buf_reset(args);
    return -1;
}
