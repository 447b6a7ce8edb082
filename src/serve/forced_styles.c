/* forced_styles — the forced-call grammars of the call styles that are not a JSON region
 * (engine/text/family.h; docs/tools.md "Call styles"). Generic: every marker comes from the
 * descriptor's tool_call / tool_syntax fields; a marker the vocabulary holds as one special
 * token is a special-token terminal (the model emits it as that token), else a text literal.
 *
 * CALL_DICT: OPEN PREFIX "NAME" dict CLOSE, the dict written in the style's own value syntax from
 * the tool's JSON Schema (a subset: see dict_value; anything else is a 400 naming the keyword),
 * properties in the order the template writes them (its `dictsort`: case-insensitive key order),
 * required ones present, optional ones optional, no undeclared keys. A permissive tool (no
 * enforced schema) gets any dict of the style's syntax.
 *
 * XML_PARAMS: OPEN "\n" FN_OPEN "NAME>\n" params FN_CLOSE "\n" CLOSE, one parameter block per
 * declared property in the schema's order (required present, optional optional), a "string"
 * parameter's value raw text (without the block's close marker), any other value a %json
 * sub-grammar of its schema (booleans as the template's Python str(): True / False). A permissive
 * tool gets any parameter blocks with raw values. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "serve/forced.h"

/* ---- shared pieces ---- */

/* A marker as a lark terminal: the special-token form <…> when the vocabulary holds it as one
 * special token and its text has that shape, else a string literal. */
static int mark(struct buf *b, const char *m, bool special)
{
    size_t n = strlen(m);
    bool shape = n >= 3 && m[0] == '<' && strchr(m, '>') == m + n - 1 && !strpbrk(m, " \n");
    if (special && shape) return buf_printf(b, " %s ", m);
    if (buf_puts(b, " \"") < 0 || family_lark_str(b, m, n) < 0) return -1;
    return buf_puts(b, "\" ");
}

static int lit(struct buf *b, const char *s, size_t n)
{
    if (buf_puts(b, " \"") < 0 || family_lark_str(b, s, n) < 0) return -1;
    return buf_puts(b, "\" ");
}

/* A regex byte: alphanumerics and UTF-8 bytes as themselves (regexes take raw UTF-8), other
 * ASCII as \xHH. */
static int rx_byte(struct buf *b, unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80)
        return buf_printf(b, "%c", c);
    return buf_printf(b, "\\x%02x", c);
}

/* The regex (no delimiters) of "any text that does not contain m", for a marker m whose first
 * byte occurs nowhere else in it (so m has no border: a match can only start at m[0]). It walks
 * the automaton of m: any byte but m[0] stays at 0; a run of m[0] then a partial match ends in a
 * byte that breaks it (back to 0), or the text ends inside a partial match.
 *     E = m0+ (?: [^m0 m1] | m1 (?: [^m0 m2] | m2 (?: … [^m0 m_{k-1}] ) ) )
 *     B = m0+ (?: m1 (?: m2 … m_{k-2}? … )? )?
 *     X = (?: [^m0] | B* E )* B*                                                          */
static int rx_not_containing(struct buf *b, const char *m)
{
    size_t k = strlen(m);
    unsigned char m0 = (unsigned char)m[0];
    int rc = 0;
    /* E */
    struct buf e = {0}, p = {0};
    rc |= buf_puts(&e, "(?:") | rx_byte(&e, m0) | buf_puts(&e, "+(?:");
    for (size_t i = 1; i < k; i++) {
        rc |= buf_puts(&e, "[^") | rx_byte(&e, m0) | rx_byte(&e, (unsigned char)m[i]) |
              buf_puts(&e, "]");
        if (i + 1 < k) rc |= buf_puts(&e, "|") | rx_byte(&e, (unsigned char)m[i]) | buf_puts(&e, "(?:");
    }
    for (size_t i = 1; i + 1 < k; i++)
        rc |= buf_puts(&e, ")");
    rc |= buf_puts(&e, "))");
    /* B */
    rc |= buf_puts(&p, "(?:") | rx_byte(&p, m0) | buf_puts(&p, "+");
    for (size_t i = 1; i + 1 < k; i++)
        rc |= buf_puts(&p, "(?:") | rx_byte(&p, (unsigned char)m[i]);
    for (size_t i = 1; i + 1 < k; i++)
        rc |= buf_puts(&p, ")?");
    rc |= buf_puts(&p, ")");
    if (!rc)
        rc |= buf_puts(b, "(?:[^") | rx_byte(b, m0) | buf_puts(b, "]|") |
              buf_append(b, p.data, p.len) | buf_puts(b, "*") | buf_append(b, e.data, e.len) |
              buf_puts(b, ")*") | buf_append(b, p.data, p.len) | buf_puts(b, "*");
    buf_free(&e);
    buf_free(&p);
    return rc ? -1 : 0;
}

static bool unique_first(const char *m)
{
    return m[0] && !strchr(m + 1, m[0]);
}

/* Python's str.lower() for dictsort's case-insensitive key order: ASCII folded; other bytes
 * compared as they are (keys of tool schemas are ASCII in practice; docs/tools.md). */
static int key_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    for (;; x++, y++) {
        unsigned char cx = (unsigned char)*x, cy = (unsigned char)*y;
        if (cx >= 'A' && cx <= 'Z') cx += 32;
        if (cy >= 'A' && cy <= 'Z') cy += 32;
        if (cx != cy || !cx) return (int)cx - (int)cy;
    }
}

/* Annotations every style ignores. */
static bool annotation(const char *k)
{
    static const char *const A[] = {"description", "title", "$schema", "$id", "$comment",
                                    "default", "examples", "deprecated", "readOnly",
                                    "writeOnly", "x-whitespace", NULL};
    for (int i = 0; A[i]; i++)
        if (!strcmp(k, A[i])) return true;
    return false;
}

/* ---- CALL_DICT ---- */

struct dctx {
    struct buf *b;   /* the rules */
    int n_rules;
    const char *q;   /* quote marker */
    bool q_special;
    const char *tool; /* for messages */
    struct err *e;
};

/* The generic rules (any value of the style's syntax), emitted once. */
static int dict_generic(struct dctx *c)
{
    struct buf *b = c->b;
    int rc = buf_puts(b, "d_value: d_str | d_dict | d_list | d_num | \"true\" | \"false\" | \"null\"\n"
                         "d_num: /-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+\\-]?[0-9]+)?/\n"
                         "d_int: /-?(?:0|[1-9][0-9]*)/\n"
                         "d_dict: \"{\" (d_kv (\",\" d_kv)*)? \"}\"\n"
                         "d_kv: /[^:{}\\[\\],<\\x20\\n\\r\\t][^:{}\\[\\],<]*/ \":\" d_value\n"
                         "d_list: \"[\" (d_value (\",\" d_value)*)? \"]\"\n");
    if (c->q_special) {
        /* the quote is one special token: text between two of them is any text */
        rc |= buf_puts(b, "d_str:") | mark(b, c->q, true) | buf_puts(b, "/[\\s\\S]+/?") |
              mark(b, c->q, true) | buf_puts(b, "\n");
    } else {
        /* one terminal from quote to quote, the text between holding no quote marker */
        rc |= buf_puts(b, "d_str: /");
        for (const char *p = c->q; *p; p++) rc |= rx_byte(b, (unsigned char)*p);
        rc |= rx_not_containing(b, c->q);
        for (const char *p = c->q; *p; p++) rc |= rx_byte(b, (unsigned char)*p);
        rc |= buf_puts(b, "/\n");
    }
    return rc ? -1 : 0;
}

/* A string literal value s in the style's syntax (quote s quote). */
static int dict_str_lit(struct dctx *c, struct buf *b, const char *s, size_t n)
{
    if (c->q_special) {
        int rc = mark(b, c->q, true);
        if (n) rc |= lit(b, s, n);
        return rc | mark(b, c->q, true);
    }
    struct buf t = {0};
    int rc = buf_puts(&t, c->q) | buf_append(&t, s, n) | buf_puts(&t, c->q);
    if (!rc) rc = lit(b, t.data, t.len);
    buf_free(&t);
    return rc;
}

static int dict_value(struct dctx *c, const json_t *s, int depth, struct buf *expr);

/* One enum / const value as the template's format_argument writes it. */
static int dict_const(struct dctx *c, const json_t *v, struct buf *expr)
{
    if (json_is_string(v)) return dict_str_lit(c, expr, json_string_value(v), json_string_length(v));
    if (json_is_true(v)) return lit(expr, "true", 4);
    if (json_is_false(v)) return lit(expr, "false", 5);
    if (json_is_null(v)) return lit(expr, "null", 4);
    if (json_is_integer(v)) {
        char t[32];
        int n = snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
        return lit(expr, t, (size_t)n);
    }
    return err_set(c->e, ERR_INVALID,
                   "tool '%s': an enum/const value that is not a string, integer, boolean or null "
                   "is not supported by this model's call format", c->tool);
}

/* A fresh rule holding alternatives of expr bodies; returns its number in *id. */
static int new_rule(struct dctx *c, const struct buf *body, int *id)
{
    *id = c->n_rules++;
    return buf_printf(c->b, "d_r%d: %.*s\n", *id, (int)body->len, body->data ? body->data : "");
}

static int dict_object(struct dctx *c, const json_t *s, int depth, struct buf *expr)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    if (props && !json_is_object(props))
        return err_set(c->e, ERR_INVALID, "tool '%s': 'properties' must be an object", c->tool);
    size_t np = json_object_size(props);
    if (np == 0) { /* no declared properties: any dict (additional properties allowed) */
        const json_t *ap = json_object_get(s, "additionalProperties");
        if (json_is_false(ap)) return buf_puts(expr, " \"{\" \"}\" ");
        if (req && json_array_size(req) > 0)
            return err_set(c->e, ERR_INVALID,
                           "tool '%s': 'required' without 'properties' is not supported by this "
                           "model's call format", c->tool);
        return buf_puts(expr, " d_dict ");
    }
    const char **keys = calloc(np, sizeof *keys);
    int rc = -1;
    if (!keys) {
        err_set(c->e, ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t i = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) keys[i++] = k;
    qsort(keys, np, sizeof *keys, key_cmp);
    for (i = 0; i < np; i++)
        if (!keys[i][0] || strpbrk(keys[i], ":{}[],<") || strchr(" \n\r\t", keys[i][0])) {
            err_set(c->e, ERR_INVALID,
                    "tool '%s': property name '%s' cannot be written in this model's call format",
                    c->tool, keys[i]);
            goto out;
        }
    size_t i_req;
    const json_t *r;
    json_array_foreach(req, i_req, r) {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r))) {
            err_set(c->e, ERR_INVALID,
                    "tool '%s': a required name that is not a declared property is not supported "
                    "by this model's call format", c->tool);
            goto out;
        }
    }
    /* members in key order; F_i: none written yet, from i on; A_i: some written, from i on.
     *   F_i = M_i A_{i+1} | F_{i+1} (when i is optional);   A_i = "," M_i A_{i+1} | A_{i+1} (optional)
     * F_np = A_np = empty. Rules are built back to front. */
    int f_next = -1, a_next = -1; /* -1: empty */
    for (size_t j = np; j-- > 0;) {
        bool required = false;
        json_array_foreach(req, i_req, r) {
            if (!strcmp(json_string_value(r), keys[j])) required = true;
        }
        struct buf m = {0}, fb = {0}, ab = {0};
        struct buf kl = {0};
        int bad = buf_printf(&kl, "%s:", keys[j]) < 0 || lit(&m, kl.data, kl.len) < 0 ||
                  dict_value(c, json_object_get(props, keys[j]), depth + 1, &m) < 0;
        buf_free(&kl);
        if (!bad) {
            /* F_j: M_j A_{j+1} | F_{j+1} (optional j); A_j: "," M_j A_{j+1} | A_{j+1} (optional j).
             * An empty F_{j+1} / A_{j+1} (j is the last) makes the optional form (…)? */
            char an[24] = "", fn[24] = "";
            if (a_next >= 0) snprintf(an, sizeof an, " d_r%d", a_next);
            if (f_next >= 0) snprintf(fn, sizeof fn, " d_r%d", f_next);
            if (required)
                bad = buf_printf(&fb, "%.*s%s", (int)m.len, m.data, an) < 0 ||
                      buf_printf(&ab, "\",\" %.*s%s", (int)m.len, m.data, an) < 0;
            else if (f_next < 0)
                bad = buf_printf(&fb, "(%.*s)?", (int)m.len, m.data) < 0 ||
                      buf_printf(&ab, "(\",\" %.*s)?", (int)m.len, m.data) < 0;
            else
                bad = buf_printf(&fb, "%.*s%s |%s", (int)m.len, m.data, an, fn) < 0 ||
                      buf_printf(&ab, "\",\" %.*s%s |%s", (int)m.len, m.data, an, an) < 0;
        }
        int fi = -1, ai = -1;
        if (!bad) bad = new_rule(c, &fb, &fi) < 0 || new_rule(c, &ab, &ai) < 0;
        buf_free(&m);
        buf_free(&fb);
        buf_free(&ab);
        if (bad) {
            if (!c->e->msg[0]) err_set(c->e, ERR_NOMEM, "out of memory");
            goto out;
        }
        f_next = fi;
        a_next = ai;
    }
    rc = buf_printf(expr, " \"{\" d_r%d \"}\" ", f_next);
out:
    free(keys);
    return rc;
}

/* The value grammar of schema s as a lark expression appended to expr (a parenthesized group
 * when it has alternatives). */
static int dict_value(struct dctx *c, const json_t *s, int depth, struct buf *expr)
{
    if (depth > 32)
        return err_set(c->e, ERR_INVALID, "tool '%s': the schema nests too deeply", c->tool);
    if (!s || json_is_true(s)) return buf_puts(expr, " d_value ");
    if (!json_is_object(s))
        return err_set(c->e, ERR_INVALID, "tool '%s': a schema must be an object", c->tool);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        static const char *const OK[] = {"type", "properties", "required", "items", "enum",
                                         "const", "anyOf", "oneOf", "additionalProperties",
                                         "nullable", NULL};
        bool ok = annotation(k);
        for (int i = 0; OK[i] && !ok; i++)
            ok = !strcmp(k, OK[i]);
        if (!ok)
            return err_set(c->e, ERR_INVALID,
                           "tool '%s': the schema keyword '%s' is not supported by this model's "
                           "call format (supported: type, properties, required, items, enum, "
                           "const, anyOf, oneOf)", c->tool, k);
    }
    /* additionalProperties: undeclared keys are never written, so it changes nothing */
    struct buf alt = {0};
    int rc = 0;
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    const json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf"); /* one of disjoint branches: as anyOf */
    if (cn) {
        rc = dict_const(c, cn, &alt);
    } else if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) {
            rc = err_set(c->e, ERR_INVALID, "tool '%s': 'enum' must be a non-empty array", c->tool);
        } else {
            size_t i;
            const json_t *x;
            json_array_foreach(en, i, x) {
                if (i) rc |= buf_puts(&alt, " | ");
                if (!rc) rc = dict_const(c, x, &alt);
            }
        }
    } else if (any) {
        size_t i;
        const json_t *x;
        if (!json_is_array(any) || json_array_size(any) == 0)
            rc = err_set(c->e, ERR_INVALID, "tool '%s': 'anyOf' must be a non-empty array", c->tool);
        json_array_foreach(any, i, x) {
            if (rc) break;
            if (i) rc = buf_puts(&alt, " | ");
            if (!rc) rc = dict_value(c, x, depth + 1, &alt);
        }
    } else {
        const json_t *type = json_object_get(s, "type");
        size_t nt = json_is_array(type) ? json_array_size(type) : type ? 1 : 0;
        if (json_is_true(json_object_get(s, "nullable"))) rc = lit(&alt, "null", 4);
        if (nt == 0 && !rc) rc = buf_printf(&alt, "%s d_value", alt.len ? " |" : "");
        for (size_t i = 0; i < nt && !rc; i++) {
            const json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
            const char *tn = json_is_string(t) ? json_string_value(t) : "";
            if (alt.len) rc = buf_puts(&alt, " | ");
            if (rc) break;
            if (!strcmp(tn, "string")) rc = buf_puts(&alt, " d_str ");
            else if (!strcmp(tn, "integer")) rc = buf_puts(&alt, " d_int ");
            else if (!strcmp(tn, "number")) rc = buf_puts(&alt, " d_num ");
            else if (!strcmp(tn, "boolean")) rc = buf_puts(&alt, " (\"true\" | \"false\") ");
            else if (!strcmp(tn, "null")) rc = lit(&alt, "null", 4);
            else if (!strcmp(tn, "object")) rc = dict_object(c, s, depth, &alt);
            else if (!strcmp(tn, "array")) {
                const json_t *it = json_object_get(s, "items");
                if (it && !json_is_object(it) && !json_is_boolean(it)) {
                    rc = err_set(c->e, ERR_INVALID,
                                 "tool '%s': 'items' as an array is not supported by this "
                                 "model's call format", c->tool);
                    break;
                }
                if (json_is_false(it)) {
                    rc = buf_puts(&alt, " \"[\" \"]\" ");
                    break;
                }
                struct buf iv = {0};
                rc = dict_value(c, it, depth + 1, &iv);
                int id = -1;
                if (!rc) {
                    struct buf body = {0};
                    rc = buf_printf(&body, "\"[\" ((%.*s) (\",\" (%.*s))*)? \"]\"", (int)iv.len,
                                    iv.data, (int)iv.len, iv.data) < 0 ||
                         new_rule(c, &body, &id) < 0;
                    buf_free(&body);
                }
                buf_free(&iv);
                if (!rc) rc = buf_printf(&alt, " d_r%d ", id) < 0;
                if (rc && !c->e->msg[0]) err_set(c->e, ERR_NOMEM, "out of memory");
            } else {
                rc = err_set(c->e, ERR_INVALID, "tool '%s': unknown schema type '%s'", c->tool, tn);
            }
        }
    }
    if (!rc) rc = buf_printf(expr, " (%.*s) ", (int)alt.len, alt.data ? alt.data : "") < 0 ? -1 : 0;
    if (rc && !c->e->msg[0]) err_set(c->e, ERR_NOMEM, "out of memory");
    buf_free(&alt);
    return rc ? -1 : 0;
}

static int build_dict(const struct family *f, unsigned specials, const struct family_tool *tools,
                      int n, struct buf *b, struct err *e)
{
    const struct family_tool_syntax *syn = &f->tool_syntax;
    if (!syn->prefix || !syn->quote || !unique_first(syn->quote))
        return err_set(e, ERR_INVALID, "this model's call format has no forced-call grammar");
    struct buf rules = {0};
    struct dctx c = {.b = &rules, .q = syn->quote, .q_special = specials & 4u, .e = e};
    int rc = buf_puts(b, "start:");
    for (int i = 0; i < n && !rc; i++)
        rc = buf_printf(b, "%s call_%d", i ? " |" : "", i) < 0;
    rc |= buf_puts(b, "\n") | dict_generic(&c);
    for (int i = 0; i < n && !rc; i++) {
        c.tool = tools[i].name;
        json_t *s = json_loads(tools[i].schema, 0, NULL);
        struct buf expr = {0}, nm = {0};
        if (!s) rc = err_set(e, ERR_NOMEM, "out of memory");
        if (!rc) rc = dict_value(&c, s, 0, &expr);
        if (!rc) rc = buf_printf(&nm, "%s%s", syn->prefix, tools[i].name) < 0;
        if (!rc)
            rc = buf_printf(b, "call_%d:", i) < 0 || mark(b, f->tool_call.open, specials & 1u) < 0 ||
                 lit(b, nm.data, nm.len) < 0 ||
                 buf_append(b, expr.data, expr.len) < 0 ||
                 mark(b, f->tool_call.close, specials & 2u) < 0 || buf_puts(b, "\n") < 0;
        json_decref(s);
        buf_free(&expr);
        buf_free(&nm);
    }
    if (!rc) rc = buf_append(b, rules.data ? rules.data : "", rules.len);
    buf_free(&rules);
    if (rc && !e->msg[0]) err_set(e, ERR_NOMEM, "out of memory");
    return rc ? -1 : 0;
}

/* ---- XML_PARAMS ---- */

/* The raw-value parameter block of key (a whole terminal from its open marker to the newline
 * after its close marker, so the lexer never has to end a free text early). */
static int xml_raw_block(struct buf *b, const struct family_tool_syntax *syn, const char *key)
{
    int rc = buf_puts(b, " /");
    for (const char *p = syn->param_open; *p; p++) rc |= rx_byte(b, (unsigned char)*p);
    if (key)
        for (const char *p = key; *p; p++) rc |= rx_byte(b, (unsigned char)*p);
    else
        rc |= buf_puts(b, "[^>\\n]+");
    rc |= buf_puts(b, "\\x3e\\x0a"); /* ">\n" */
    struct buf m = {0};
    rc |= buf_printf(&m, "\n%s", syn->param_close);
    if (!rc) rc |= rx_not_containing(b, m.data);
    for (const char *p = m.data; p && *p; p++) rc |= rx_byte(b, (unsigned char)*p);
    buf_free(&m);
    return rc | buf_puts(b, "\\x0a/ ");
}

static bool type_has_string(const json_t *t)
{
    if (json_is_string(t)) return !strcmp(json_string_value(t), "string");
    size_t i;
    const json_t *x;
    json_array_foreach(t, i, x) {
        if (json_is_string(x) && !strcmp(json_string_value(x), "string")) return true;
    }
    return false;
}

/* "string" (alone or in a type list) and annotations only: any raw text is a value of it (the
 * reply scanner reads a raw text as the list's other types where it can, else as the string). */
static bool is_plain_string(const json_t *s)
{
    const json_t *t = json_object_get(s, "type");
    if (!type_has_string(t)) return false;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (strcmp(k, "type") && !annotation(k)) return false;
    }
    return true;
}

static int xml_param(struct buf *b, const struct family_tool_syntax *syn, const char *tool,
                     const char *key, const json_t *ps, struct err *e)
{
    if (!key[0] || strpbrk(key, ">\n"))
        return err_set(e, ERR_INVALID,
                       "tool '%s': parameter name '%s' cannot be written in this model's call "
                       "format", tool, key);
    if (!ps || json_is_true(ps) || is_plain_string(ps)) return xml_raw_block(b, syn, key);
    if (!json_is_object(ps))
        return err_set(e, ERR_INVALID, "tool '%s': the schema of '%s' must be an object", tool, key);
    const json_t *t = json_object_get(ps, "type");
    if (json_is_array(t) && type_has_string(t))
        return err_set(e, ERR_INVALID,
                       "tool '%s': '%s' has a type list with \"string\" and other keywords, which "
                       "this model's call format cannot enforce (a string is written raw)", tool, key);
    if (json_is_string(t) && !strcmp(json_string_value(t), "string")) {
        /* a string with constraints: only enum / const can be written raw */
        const json_t *en = json_object_get(ps, "enum"), *cn = json_object_get(ps, "const");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)ps, k, v) {
            if (strcmp(k, "type") && strcmp(k, "enum") && strcmp(k, "const") && !annotation(k))
                return err_set(e, ERR_INVALID,
                               "tool '%s': the string keyword '%s' of '%s' is not supported by "
                               "this model's call format (a string is written raw)", tool, k, key);
        }
        struct buf o = {0};
        int rc = buf_printf(&o, "%s%s>\n", syn->param_open, key) < 0 || lit(b, o.data, o.len) < 0;
        buf_free(&o);
        rc |= buf_puts(b, " (") < 0;
        size_t i;
        const json_t *x;
        if (cn) rc |= !json_is_string(cn) || lit(b, json_string_value(cn), json_string_length(cn)) < 0;
        else json_array_foreach(en, i, x) {
            if (!json_is_string(x)) { rc = 1; break; }
            rc |= (i && buf_puts(b, " | ") < 0) || lit(b, json_string_value(x), json_string_length(x)) < 0;
        }
        if (rc) return err_set(e, ERR_INVALID, "tool '%s': the enum of string '%s' must hold strings", tool, key);
        struct buf c = {0};
        rc = buf_printf(&c, "\n%s\n", syn->param_close) < 0 || buf_puts(b, ") ") < 0 ||
             lit(b, c.data, c.len) < 0;
        buf_free(&c);
        return rc ? err_set(e, ERR_NOMEM, "out of memory") : 0;
    }
    struct buf o = {0}, c = {0};
    char *sub = NULL;
    int rc = 0;
    if (json_is_string(t) && !strcmp(json_string_value(t), "boolean")) {
        /* the template writes a boolean with Python's str(): True / False */
        rc = buf_printf(&o, "%s%s>\n", syn->param_open, key) < 0 || lit(b, o.data, o.len) < 0 ||
             buf_puts(b, " (\"True\" | \"False\") ") < 0;
    } else {
        sub = json_dumps(ps, JSON_COMPACT);
        rc = !sub || buf_printf(&o, "%s%s>\n", syn->param_open, key) < 0 ||
             lit(b, o.data, o.len) < 0 || buf_printf(b, " %%json%s ", sub) < 0;
    }
    rc = rc || buf_printf(&c, "\n%s\n", syn->param_close) < 0 || lit(b, c.data, c.len) < 0;
    free(sub);
    buf_free(&o);
    buf_free(&c);
    return rc ? err_set(e, ERR_NOMEM, "out of memory") : 0;
}

static int build_xml(const struct family *f, unsigned specials, const struct family_tool *tools,
                     int n, struct buf *b, struct err *e)
{
    const struct family_tool_syntax *syn = &f->tool_syntax;
    if (!syn->fn_open || !syn->fn_close || !syn->param_open || !syn->param_close ||
        syn->param_close[0] == '\n' || strchr(syn->param_close, '\n'))
        return err_set(e, ERR_INVALID, "this model's call format has no forced-call grammar");
    int rc = buf_puts(b, "start:");
    for (int i = 0; i < n && !rc; i++)
        rc = buf_printf(b, "%s call_%d", i ? " |" : "", i) < 0;
    rc |= buf_puts(b, "\n");
    for (int i = 0; i < n && !rc; i++) {
        json_t *s = json_loads(tools[i].schema, 0, NULL);
        struct buf head = {0}, tail = {0};
        if (!s) {
            rc = err_set(e, ERR_NOMEM, "out of memory");
            break;
        }
        rc = buf_printf(&head, "\n%s%s>\n", syn->fn_open, tools[i].name) < 0 ||
             buf_printf(&tail, "%s\n", syn->fn_close) < 0 || buf_printf(b, "call_%d:", i) < 0 ||
             mark(b, f->tool_call.open, specials & 1u) < 0 || lit(b, head.data, head.len) < 0;
        const json_t *props = json_object_get(s, "properties");
        const json_t *req = json_object_get(s, "required");
        if (!rc && json_object_size(props) == 0) {
            rc = buf_puts(b, " (") < 0 || xml_raw_block(b, syn, NULL) < 0 || buf_puts(b, ")*") < 0;
        } else if (!rc) {
            const char *k;
            const json_t *v;
            json_object_foreach((json_t *)props, k, v) {
                bool required = false;
                size_t j;
                const json_t *r;
                json_array_foreach(req, j, r) {
                    if (json_is_string(r) && !strcmp(json_string_value(r), k)) required = true;
                }
                rc = buf_puts(b, " (") < 0 || xml_param(b, syn, tools[i].name, k, v, e) < 0 ||
                     buf_puts(b, required ? ")" : ")?") < 0;
                if (rc) break;
            }
        }
        if (!rc)
            rc = lit(b, tail.data, tail.len) < 0 || mark(b, f->tool_call.close, specials & 2u) < 0 ||
                 buf_puts(b, "\n") < 0;
        json_decref(s);
        buf_free(&head);
        buf_free(&tail);
    }
    if (rc && !e->msg[0]) err_set(e, ERR_NOMEM, "out of memory");
    return rc ? -1 : 0;
}

int forced_style_build(const struct family *f, unsigned specials, const struct family_tool *tools,
                       int n, struct buf *b, struct err *e)
{
    err_clear(e);
    if (f->tool_style == FAMILY_TOOLS_CALL_DICT) return build_dict(f, specials, tools, n, b, e);
    if (f->tool_style == FAMILY_TOOLS_XML_PARAMS) return build_xml(f, specials, tools, n, b, e);
    return err_set(e, ERR_INVALID, "this model has no tool-calling convention");
}

bool forced_style_builds(const struct family *f)
{
    return f && (f->tool_style == FAMILY_TOOLS_CALL_DICT || f->tool_style == FAMILY_TOOLS_XML_PARAMS);
}
