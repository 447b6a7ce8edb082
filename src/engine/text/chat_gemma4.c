/* chat_gemma4 — Gemma 4's chat_template (tests/chat/gemma4/template.jinja, the template of
 * google/gemma-4-31B-it as llama.cpp ships it) in C, and below it the gemma4 family descriptor.
 *
 * Each branch mirrors one branch of the Jinja template; the comments quote it. Literal template
 * text is emitted with S() (structure: control tokens real), request text with T() (plain).
 * Python semantics reproduced: `| trim` is str.strip() (Python's whitespace: str.isspace());
 * strip_thinking splits on '<channel|>' and keeps, of each part holding '<|channel>', only the
 * text before its first '<|channel>'.
 *
 * What is rendered: system / developer first (into the system turn, with <|think|> when
 * reasoning is on, then the tool declarations <|tool>declaration:NAME{…}<tool|>), user,
 * assistant (as role "model"; an assistant right after an assistant continues the same turn, no
 * new header; its reasoning beside its tool calls after the last user message; its calls as
 * <|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>, the tool results that follow it as
 * <|tool_response>response:NAME{value:<|"|>…<|"|>}<tool_response|> inside the same turn), later
 * system messages (their own turn), the generation prompt (with the empty thought channel when
 * reasoning is off; none right after a call or a result, where the model goes on in its turn).
 * Python values are printed as Jinja2 prints them (str(), repr() inside lists and dicts,
 * True/False/None, float repr); `dictsort` orders keys case-insensitively (str.lower(), stable).
 * Refused (a 400 naming the reason) where Jinja2 would raise (a tool result answering no call
 * and without a name, a 'required' that is a number) or where Python's rendering is not
 * reproduced (| upper of non-ASCII text, integers beyond 64 bits in arguments).
 *
 * bos_token: the template starts with {{ bos_token }}; lmserve adds <bos> as a token (the vocab's
 * add_bos, forced on for gemma4), so the renderer reproduces the template rendered with
 * bos_token = "" (tests/suites/46-chat-gemma4.sh renders Jinja2 that way). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "engine/text/chat_internal.h"
#include "engine/text/family.h"

static void S(struct chat_prompt *out, const char *s)
{
    chat_emit_struct(out, s);
}
static void T(struct chat_prompt *out, struct chat_sv s)
{
    chat_emit_text(out, s.p, s.n);
}

/* {{- strip_thinking(text) -}}:
 *   for part in text.split('<channel|>'):
 *     result += part.split('<|channel>')[0] if '<|channel>' in part else part
 *   result | trim
 * The kept pieces are collected, then the whole is trimmed. */
static int strip_thinking(struct chat_prompt *out, struct chat_sv text)
{
    struct buf r = {0};
    const char *close = "<channel|>", *open = "<|channel>";
    size_t lc = strlen(close);
    struct chat_sv rest = text;
    for (;;) {
        const char *c = chat_sv_find(rest, close);
        struct chat_sv part = {rest.p, c ? (size_t)(c - rest.p) : rest.n};
        const char *o = chat_sv_find(part, open);
        if (buf_append(&r, part.p, o ? (size_t)(o - part.p) : part.n)) goto nomem;
        if (!c) break;
        rest = (struct chat_sv){c + lc, rest.n - (size_t)(c + lc - rest.p)};
    }
    T(out, chat_sv_trim((struct chat_sv){r.data ? r.data : "", r.len}));
    buf_free(&r);
    return 0;
nomem:
    buf_free(&r);
    out->failed = true;
    return -1;
}

/* ---- Python values: what Jinja2 prints for the JSON values of tools and arguments ---- */

/* Python's str.isprintable() for one code point: not Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other
 * than the space. */
static bool py_printable(uint32_t c)
{
    if (c == ' ') return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

/* repr() of a str: single quotes unless it holds ' and no ", escapes as Python writes them. */
static int py_repr_str(struct buf *o, const char *s, size_t n)
{
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    int rc = buf_append(o, &q, 1);
    for (size_t i = 0; i < n && !rc;) {
        uint32_t c;
        size_t l = chat_cp_at((const unsigned char *)s + i, n - i, &c);
        if (c == (uint32_t)q || c == '\\') rc = buf_printf(o, "\\%c", (char)c);
        else if (c == '\t') rc = buf_puts(o, "\\t");
        else if (c == '\n') rc = buf_puts(o, "\\n");
        else if (c == '\r') rc = buf_puts(o, "\\r");
        else if (c < 0x20 || c == 0x7f) rc = buf_printf(o, "\\x%02x", c);
        else if (c < 0x80 || py_printable(c)) rc = buf_append(o, s + i, l);
        else if (c <= 0xff) rc = buf_printf(o, "\\x%02x", c);
        else if (c <= 0xffff) rc = buf_printf(o, "\\u%04x", c);
        else rc = buf_printf(o, "\\U%08x", c);
        i += l;
    }
    return rc ? -1 : buf_append(o, &q, 1);
}

static int py_repr(struct buf *o, const json_t *v);

/* str() of a JSON value as Python holds it (str, int, float, True/False/None, list, dict). */
static int py_str(struct buf *o, const json_t *v)
{
    if (json_is_string(v)) return buf_append(o, json_string_value(v), json_string_length(v));
    return py_repr(o, v);
}

static int py_repr(struct buf *o, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING: return py_repr_str(o, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: return buf_printf(o, "%lld", (long long)json_integer_value(v));
    case JSON_REAL: return chat_py_float_repr(json_real_value(v), o);
    case JSON_TRUE: return buf_puts(o, "True");
    case JSON_FALSE: return buf_puts(o, "False");
    case JSON_NULL: return buf_puts(o, "None");
    case JSON_ARRAY: {
        int rc = buf_puts(o, "[");
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) rc |= (i ? buf_puts(o, ", ") : 0) | py_repr(o, x);
        return rc | buf_puts(o, "]");
    }
    case JSON_OBJECT: {
        int rc = buf_puts(o, "{");
        const char *k;
        const json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            rc |= (first ? 0 : buf_puts(o, ", ")) | py_repr_str(o, k, strlen(k)) | buf_puts(o, ": ") |
                  py_repr(o, x);
            first = false;
        }
        return rc | buf_puts(o, "}");
    }
    }
    return -1;
}

/* Python truthiness; NULL (a missing key: Jinja2's Undefined) is false. */
static bool py_true(const json_t *v)
{
    if (!v) return false;
    switch (json_typeof(v)) {
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return true;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    default: return false;
    }
}

/* value[key] as Jinja2 evaluates it on a JSON value: the member of an object, else Undefined
 * (NULL) — str, list, number: no such item or attribute. */
static const json_t *jget(const json_t *v, const char *key)
{
    return json_is_object(v) ? json_object_get(v, key) : NULL;
}

/* | upper of a value: str() then str.upper(); only ASCII is folded here, so a value with other
 * letters is refused (-2) rather than guessed (Python's full case mapping). Undefined → "". */
static int py_upper(struct buf *o, const json_t *v)
{
    if (!v) return 0;
    struct buf t = {0};
    if (py_str(&t, v) < 0) {
        buf_free(&t);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < t.len && !rc; i++) {
        unsigned char c = (unsigned char)t.data[i];
        if (c >= 0x80) rc = -2;
        else rc = buf_printf(o, "%c", c >= 'a' && c <= 'z' ? c - 32 : c);
    }
    buf_free(&t);
    return rc;
}

/* Lower-cased key for dictsort (Python's str.lower(): utf8proc's simple mapping, plus U+0130's
 * two-code-point lowercase; the final-sigma rule is not reproduced). */
struct skey {
    char *low;
    const char *key;
    const json_t *val;
    size_t idx;
};

static int skey_cmp(const void *a, const void *b)
{
    const struct skey *x = a, *y = b;
    int c = strcmp(x->low, y->low);
    return c ? c : (x->idx < y->idx ? -1 : 1); /* sorted() is stable */
}

static char *py_lower(const char *s)
{
    struct buf o = {0};
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t l = chat_cp_at((const unsigned char *)s + i, n - i, &c);
        char u[4];
        if (c == 0x130) {
            buf_puts(&o, "i\xcc\x87");
        } else {
            utf8proc_ssize_t k = utf8proc_encode_char(utf8proc_tolower((utf8proc_int32_t)c), (utf8proc_uint8_t *)u);
            buf_append(&o, u, k > 0 ? (size_t)k : 0);
        }
        i += l;
    }
    if (!o.data) buf_puts(&o, "");
    return buf_steal(&o);
}

/* The members of object v in dictsort order (case-insensitive, stable); *n their count. NULL with
 * *n = 0 for an empty object; -1 on OOM. */
static int dictsort(const json_t *v, struct skey **out, size_t *n)
{
    *out = NULL;
    *n = json_object_size(v);
    if (!*n) return 0;
    struct skey *k = calloc(*n, sizeof *k);
    if (!k) return -1;
    size_t i = 0;
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        k[i] = (struct skey){py_lower(key), key, x, i};
        if (!k[i].low) {
            for (size_t j = 0; j <= i; j++) free(k[j].low);
            free(k);
            return -1;
        }
        i++;
    }
    qsort(k, *n, sizeof *k, skey_cmp);
    *out = k;
    return 0;
}

static void skeys_free(struct skey *k, size_t n)
{
    for (size_t i = 0; i < n; i++) free(k[i].low);
    free(k);
}

/* Renders to a prompt with a place for refusals (a value Jinja2 would raise on, or one whose
 * Python rendering is not reproduced here). */
struct g4 {
    struct chat_prompt *out;
    struct err *e;
    int bad; /* set once: the first error wins */
};

#define Q "<|\"|>"

static void g4_fail(struct g4 *g, enum err_code code, const char *what)
{
    if (!g->bad) err_set_param(g->e, code, "tools", "%s", what);
    g->bad = 1;
}

/* Plain text of a Python str() of v. */
static void TV(struct g4 *g, const json_t *v)
{
    struct buf t = {0};
    if (py_str(&t, v) < 0) g->out->failed = true;
    T(g->out, (struct chat_sv){t.data ? t.data : "", t.len});
    buf_free(&t);
}

static void TU(struct g4 *g, const json_t *v) /* {{ v | upper }} */
{
    struct buf t = {0};
    int rc = py_upper(&t, v);
    if (rc == -2) g4_fail(g, ERR_UNSUPPORTED, "a schema type with non-ASCII letters (| upper)");
    else if (rc < 0) g->out->failed = true;
    T(g->out, (struct chat_sv){t.data ? t.data : "", t.len});
    buf_free(&t);
}

static bool upper_is(const json_t *v, const char *want)
{
    struct buf t = {0};
    bool r = py_upper(&t, v) == 0 && t.len == strlen(want) && !memcmp(t.data, want, t.len);
    buf_free(&t);
    return r;
}

/* format_argument(argument, escape_keys) */
static void format_argument(struct g4 *g, const json_t *a, bool escape_keys, int depth)
{
    if (depth > 64) {
        g4_fail(g, ERR_INVALID, "a value nests too deeply");
        return;
    }
    if (json_is_string(a)) {
        S(g->out, Q);
        T(g->out, (struct chat_sv){json_string_value(a), json_string_length(a)});
        S(g->out, Q);
    } else if (json_is_boolean(a)) {
        S(g->out, json_is_true(a) ? "true" : "false");
    } else if (json_is_object(a)) {
        S(g->out, "{");
        struct skey *k;
        size_t n;
        if (dictsort(a, &k, &n) < 0) {
            g->out->failed = true;
            return;
        }
        for (size_t i = 0; i < n; i++) {
            if (i) S(g->out, ",");
            if (escape_keys) S(g->out, Q);
            T(g->out, chat_sv_of(k[i].key));
            if (escape_keys) S(g->out, Q);
            S(g->out, ":");
            format_argument(g, k[i].val, escape_keys, depth + 1);
        }
        skeys_free(k, n);
        S(g->out, "}");
    } else if (json_is_array(a)) {
        S(g->out, "[");
        size_t i;
        const json_t *x;
        json_array_foreach(a, i, x) {
            if (i) S(g->out, ",");
            format_argument(g, x, escape_keys, depth + 1);
        }
        S(g->out, "]");
    } else {
        TV(g, a); /* {{- argument -}}: numbers, None */
    }
}

/* The items of a value a template `for` iterates: a list's elements, a str's characters, a
 * dict's keys; anything else raises in Jinja2 (refused). Calls fn(g, item) on each. */
static void for_each_item(struct g4 *g, const json_t *v, void (*fn)(struct g4 *, const json_t *, bool last))
{
    if (json_is_array(v)) {
        size_t i, n = json_array_size(v);
        for (i = 0; i < n; i++) fn(g, json_array_get(v, i), i + 1 == n);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        for (size_t i = 0; i < n;) {
            uint32_t c;
            size_t l = chat_cp_at((const unsigned char *)s + i, n - i, &c);
            json_t *ch = json_stringn(s + i, l);
            if (!ch) { g->out->failed = true; return; }
            fn(g, ch, i + l >= n);
            json_decref(ch);
            i += l;
        }
    } else if (json_is_object(v)) {
        size_t n = json_object_size(v), i = 0;
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            json_t *ks = json_string(k);
            if (!ks) { g->out->failed = true; return; }
            fn(g, ks, ++i == n);
            json_decref(ks);
        }
    } else if (v) {
        g4_fail(g, ERR_INVALID, "a schema's 'required' or 'type' is not iterable");
    }
}

/* <|"|>{{- item -}}<|"|> followed by ',' unless last */
static void quoted_item(struct g4 *g, const json_t *x, bool last)
{
    S(g->out, Q);
    TV(g, x);
    S(g->out, Q);
    if (!last) S(g->out, ",");
}

static void upper_item_list(struct g4 *g, const json_t *v) /* item_value | map('upper') | list */
{
    json_t *l = json_array();
    if (!l) { g->out->failed = true; return; }
    size_t n = 0;
    const json_t *src = v;
    json_t *tmp = NULL;
    if (json_is_object(v)) { /* iterating a dict gives its keys */
        tmp = json_array();
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x) json_array_append_new(tmp, json_string(k));
        src = tmp;
    } else if (json_is_string(v)) {
        tmp = json_array();
        const char *s = json_string_value(v);
        size_t sn = json_string_length(v);
        for (size_t i = 0; i < sn;) {
            uint32_t c;
            size_t cl = chat_cp_at((const unsigned char *)s + i, sn - i, &c);
            json_array_append_new(tmp, json_stringn(s + i, cl));
            i += cl;
        }
        src = tmp;
    } else if (!json_is_array(v)) {
        g4_fail(g, ERR_INVALID, "a schema 'type' that is not a string or list");
        json_decref(l);
        return;
    }
    size_t i;
    const json_t *x;
    json_array_foreach(src, i, x) {
        struct buf t = {0};
        int rc = py_upper(&t, x);
        if (rc == -2) g4_fail(g, ERR_UNSUPPORTED, "a schema type with non-ASCII letters (| upper)");
        json_array_append_new(l, json_stringn(t.data ? t.data : "", t.len));
        buf_free(&t);
        n++;
    }
    (void)n;
    format_argument(g, l, true, 0);
    json_decref(l);
    json_decref(tmp);
}

/* {%- if add_comma %},{%- else -%}{%- set add_comma = true -%}{% endif -%} */
static void comma(struct g4 *g, bool *add)
{
    if (*add) S(g->out, ",");
    else *add = true;
}

static void format_parameters(struct g4 *g, const json_t *props, int depth);

static void format_items(struct g4 *g, const json_t *items, int depth)
{
    S(g->out, "items:{");
    struct skey *k;
    size_t n;
    if (dictsort(items, &k, &n) < 0) {
        g->out->failed = true;
        return;
    }
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        const json_t *iv = k[i].val;
        if (json_is_null(iv)) continue; /* {%- if item_value is not none -%} */
        if (found) S(g->out, ",");
        found = true;
        if (!strcmp(k[i].key, "properties")) {
            S(g->out, "properties:{");
            if (json_is_object(iv)) format_parameters(g, iv, depth + 1);
            S(g->out, "}");
        } else if (!strcmp(k[i].key, "required")) {
            S(g->out, "required:[");
            for_each_item(g, iv, quoted_item);
            S(g->out, "]");
        } else if (!strcmp(k[i].key, "type")) {
            S(g->out, "type:");
            if (json_is_string(iv)) {
                struct buf t = {0};
                int rc = py_upper(&t, iv);
                if (rc == -2) g4_fail(g, ERR_UNSUPPORTED, "a schema type with non-ASCII letters (| upper)");
                json_t *u = json_stringn(t.data ? t.data : "", t.len);
                buf_free(&t);
                if (u) format_argument(g, u, true, 0);
                else g->out->failed = true;
                json_decref(u);
            } else {
                upper_item_list(g, iv);
            }
        } else {
            T(g->out, chat_sv_of(k[i].key));
            S(g->out, ":");
            format_argument(g, iv, true, 0);
        }
    }
    skeys_free(k, n);
    S(g->out, "}");
}

/* {%- macro format_parameters(properties, required) -%} (required is unused by the macro) */
static void format_parameters(struct g4 *g, const json_t *props, int depth)
{
    static const char *const STD[] = {"description", "type", "properties", "required", "nullable", NULL};
    if (depth > 32) {
        g4_fail(g, ERR_INVALID, "a tool schema nests too deeply");
        return;
    }
    if (!json_is_object(props)) {
        g4_fail(g, ERR_INVALID, "a tool schema's 'properties' is not an object");
        return;
    }
    struct skey *k;
    size_t n;
    if (dictsort(props, &k, &n) < 0) {
        g->out->failed = true;
        return;
    }
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        bool std = false;
        for (int j = 0; STD[j]; j++) std |= !strcmp(k[i].key, STD[j]);
        if (std) continue;
        const json_t *v = k[i].val;
        bool add = false;
        if (found) S(g->out, ",");
        found = true;
        T(g->out, chat_sv_of(k[i].key));
        S(g->out, ":{");
        if (py_true(jget(v, "description"))) {
            S(g->out, "description:" Q);
            TV(g, jget(v, "description"));
            S(g->out, Q);
            add = true;
        }
        const json_t *type = jget(v, "type");
        if (upper_is(type, "STRING")) {
            if (py_true(jget(v, "enum"))) {
                comma(g, &add);
                S(g->out, "enum:");
                format_argument(g, jget(v, "enum"), true, 0);
            }
        } else if (upper_is(type, "ARRAY")) {
            const json_t *items = jget(v, "items");
            if (json_is_object(items) && py_true(items)) {
                comma(g, &add);
                format_items(g, items, depth);
            }
        }
        if (py_true(jget(v, "nullable"))) {
            comma(g, &add);
            S(g->out, "nullable:true");
        }
        if (upper_is(type, "OBJECT")) {
            const json_t *pp = jget(v, "properties");
            if (json_is_object(pp)) {
                comma(g, &add);
                S(g->out, "properties:{");
                format_parameters(g, pp, depth + 1);
                S(g->out, "}");
            } else if (json_is_object(v)) {
                comma(g, &add);
                S(g->out, "properties:{");
                format_parameters(g, v, depth + 1);
                S(g->out, "}");
            }
            if (py_true(jget(v, "required"))) {
                comma(g, &add);
                S(g->out, "required:[");
                for_each_item(g, jget(v, "required"), quoted_item);
                S(g->out, "]");
            }
        }
        comma(g, &add);
        S(g->out, "type:" Q);
        TU(g, type);
        S(g->out, Q "}");
    }
    skeys_free(k, n);
}

/* {{- format_function_declaration(tool) | trim -}}: the output starts with "declaration:" and
 * ends with "}", so trim changes nothing. */
static void format_function_declaration(struct g4 *g, const json_t *tool)
{
    const json_t *fn = jget(tool, "function");
    if (!json_is_object(fn)) {
        g4_fail(g, ERR_INVALID, "a tool without a 'function'");
        return;
    }
    S(g->out, "declaration:");
    if (jget(fn, "name")) TV(g, jget(fn, "name"));
    S(g->out, "{description:" Q);
    if (jget(fn, "description")) TV(g, jget(fn, "description"));
    S(g->out, Q);
    const json_t *params = jget(fn, "parameters");
    if (py_true(params)) {
        S(g->out, ",parameters:{");
        const json_t *pp = jget(params, "properties");
        if (py_true(pp)) {
            S(g->out, "properties:{");
            format_parameters(g, pp, 0);
            S(g->out, "},");
        }
        if (py_true(jget(params, "required"))) {
            S(g->out, "required:[");
            for_each_item(g, jget(params, "required"), quoted_item);
            S(g->out, "],");
        }
        if (py_true(jget(params, "type"))) {
            S(g->out, "type:" Q);
            TU(g, jget(params, "type"));
            S(g->out, Q "}");
        }
    }
    if (jget(fn, "response")) { /* {%- if 'response' in tool_data['function'] -%} */
        const json_t *r = jget(fn, "response");
        S(g->out, ",response:{");
        if (py_true(jget(r, "description"))) {
            S(g->out, "description:" Q);
            TV(g, jget(r, "description"));
            S(g->out, Q ",");
        }
        if (upper_is(jget(r, "type"), "OBJECT")) {
            S(g->out, "type:" Q);
            TU(g, jget(r, "type"));
            S(g->out, Q "}");
        }
    }
    S(g->out, "}");
}

/* format_tool_response_block(name, response) for a str response: the template's tool
 * messages reach it with string content (the request mapping joins text parts). */
static void tool_response_block(struct g4 *g, const char *name, const char *content)
{
    S(g->out, "<|tool_response>response:");
    T(g->out, chat_sv_of(name));
    S(g->out, "{value:" Q);
    T(g->out, chat_sv_of(content));
    S(g->out, Q "}<tool_response|>");
}

/* An assistant tool call: '<|tool_call>call:' NAME '{' args '}<tool_call|>', the arguments (JSON
 * text) rendered as the template's mapping branch when they are a JSON object, else as its
 * string branch (the text itself). */
static int tool_call(struct g4 *g, const struct chat_tool_call *tc, int i, int j)
{
    S(g->out, "<|tool_call>call:");
    T(g->out, chat_sv_of(tc->name));
    S(g->out, "{");
    json_error_t je;
    const char *a = tc->arguments ? tc->arguments : "";
    json_t *args = json_loads(a, JSON_DECODE_ANY, &je);
    if (!args && strstr(je.text, "too big")) {
        json_decref(args);
        return err_set_param(g->e, ERR_UNSUPPORTED, "messages",
                             "message %d, tool call %d: an integer in the arguments is too large",
                             i, j);
    }
    if (json_is_object(args)) {
        struct skey *k;
        size_t n;
        if (dictsort(args, &k, &n) < 0) g->out->failed = true;
        else {
            for (size_t x = 0; x < n; x++) {
                if (x) S(g->out, ",");
                T(g->out, chat_sv_of(k[x].key));
                S(g->out, ":");
                format_argument(g, k[x].val, false, 0);
            }
            skeys_free(k, n);
        }
    } else {
        T(g->out, chat_sv_of(a));
    }
    json_decref(args);
    S(g->out, "}<tool_call|>");
    return 0;
}

int chat_render_gemma4(const struct chat_msg *m, int n, const struct chat_prompt_opts *o,
                       struct chat_prompt *out, struct err *e)
{
    if (n <= 0 || !m)
        return err_set_param(e, ERR_INVALID, "messages", "the conversation has no messages");
    if (o->tools && !json_is_array(o->tools))
        return err_set_param(e, ERR_INVALID, "tools", "'tools' must be an array");
    for (int i = 0; i < n; i++)
        if ((unsigned)m[i].role >= CHAT_ROLE_COUNT || !m[i].content)
            return err_set_param(e, ERR_INVALID, "messages", "message %d has no role or content", i);
    bool tools = o->tools && json_array_size(o->tools) > 0;
    struct g4 g = {.out = out, .e = e};
    /* ns.prev_message_type: NONE, then what the last rendered piece was */
    enum { P_NONE, P_OTHER, P_TOOL_CALL, P_TOOL_RESPONSE } prev = P_NONE;

    /* {%- if (enable_thinking is defined and enable_thinking) or tools or
     *        messages[0]['role'] in ['system', 'developer'] -%} */
    int first = 0;
    if (o->enable_thinking || tools || m[0].role == CHAT_SYSTEM) {
        S(out, "<|turn>system\n");
        if (o->enable_thinking) {
            S(out, "<|think|>\n");
            prev = P_OTHER; /* 'think' */
        }
        if (m[0].role == CHAT_SYSTEM) {
            T(out, chat_sv_trim(chat_sv_of(m[0].content)));
            first = 1; /* loop_messages = messages[1:] */
        }
        if (tools) {
            size_t i;
            const json_t *t;
            json_array_foreach(o->tools, i, t) {
                S(out, "<|tool>");
                format_function_declaration(&g, t);
                S(out, "<tool|>");
            }
            prev = P_OTHER; /* 'tool' */
        }
        S(out, "<turn|>\n");
    }
    if (g.bad) goto fail;

    /* ns_turn.last_user_idx: the last user message of loop_messages */
    int last_user = -1;
    for (int i = first; i < n; i++)
        if (m[i].role == CHAT_USER) last_user = i;

    for (int i = first; i < n; i++) {
        const struct chat_msg *msg = &m[i];
        if (msg->role == CHAT_TOOL) continue; /* rendered beside the calls they answer */
        prev = P_NONE;
        bool model = msg->role == CHAT_ASSISTANT;
        /* prev_nt: the nearest earlier non-tool message of loop_messages */
        int pj = i - 1;
        while (pj >= first && m[pj].role == CHAT_TOOL) pj--;
        bool cont = model && pj >= first && m[pj].role == CHAT_ASSISTANT;
        if (!cont) {
            S(out, "<|turn>");
            S(out, model ? "model" : msg->role == CHAT_SYSTEM ? "system" : "user");
            S(out, "\n");
        }
        /* reasoning beside tool calls after the last user message */
        if (msg->reasoning_content && msg->reasoning_content[0] && i > last_user &&
            msg->n_tool_calls > 0) {
            S(out, "<|channel>thought\n");
            T(out, chat_sv_of(msg->reasoning_content));
            S(out, "\n<channel|>");
        }
        for (int j = 0; j < msg->n_tool_calls; j++) {
            if (!msg->tool_calls[j].name)
                return err_set_param(e, ERR_INVALID, "messages", "message %d: a tool call without a name", i);
            if (tool_call(&g, &msg->tool_calls[j], i, j) < 0) goto fail_set;
            prev = P_TOOL_CALL;
        }
        bool responses = false;
        if (msg->n_tool_calls > 0) {
            /* the consecutive tool messages after it, each named by its call's id */
            for (int k = i + 1; k < n && m[k].role == CHAT_TOOL; k++) {
                const char *name = m[k].name;
                for (int j = 0; j < msg->n_tool_calls; j++) {
                    const char *id = msg->tool_calls[j].id, *want = m[k].tool_call_id;
                    if ((!id && !want) || (id && want && !strcmp(id, want)))
                        name = msg->tool_calls[j].name;
                }
                if (!name)
                    return err_set_param(e, ERR_INVALID, "messages",
                                         "message %d: a tool result that answers no tool call "
                                         "(no matching tool_call_id) and has no name", k);
                tool_response_block(&g, name, m[k].content);
                responses = true;
                prev = P_TOOL_RESPONSE;
            }
        }
        if (model) {
            if (strip_thinking(out, chat_sv_of(msg->content))) break;
        } else {
            T(out, chat_sv_trim(chat_sv_of(msg->content)));
        }
        /* a prefill (continue_final) stays open */
        if (o->continue_final && i == n - 1 && model) continue;
        if (prev == P_TOOL_CALL && !responses)
            S(out, "<|tool_response>");
        else if (!(responses && !msg->content[0]))
            S(out, "<turn|>\n");
    }
    if (g.bad) goto fail;

    /* {%- if add_generation_prompt -%} {%- if ns.prev_message_type != 'tool_response' and
     * != 'tool_call' -%} {{- '<|turn>model\n' -}} {%- if not enable_thinking -%}
     * {{- '<|channel>thought\n<channel|>' -}} */
    if (o->add_generation_prompt && !(o->continue_final && m[n - 1].role == CHAT_ASSISTANT) &&
        prev != P_TOOL_RESPONSE && prev != P_TOOL_CALL) {
        S(out, "<|turn>model\n");
        if (!o->enable_thinking) S(out, "<|channel>thought\n<channel|>");
    }
    if (out->failed) return err_set(e, ERR_NOMEM, "out of memory rendering the prompt");
    return 0;
fail:
    return -1; /* g.bad: e is set */
fail_set:
    return -1;
}

/* ---- the family descriptor (engine/text/family.h) ---- */

static const char *const GEMMA4_ARCHS[] = {"gemma4", NULL};
/* <turn|> ends a model turn; <eos> ends generation; <|tool_response> follows the model's tool
 * calls (the template writes it after calls that have no results yet: the model stops there and
 * waits for them; llama.cpp's gemma4 end-of-generation set has it too). */
static const char *const GEMMA4_END_OF_TURN[] = {"<turn|>", "<eos>", "<|tool_response>", NULL};

const struct family family_gemma4 = {
    .name = "gemma4",
    .archs = GEMMA4_ARCHS,
    .render = chat_render_gemma4,
    /* FNV-1a 64 of tests/chat/gemma4/template.jinja (16,448 bytes) */
    .templates = {0xe5340ed712edbd88ull},
    .caps = {.grammar = true, .reasoning = true, .stop = true, .system_role = true,
             .kv_reuse = true},
    /* <|think|> in the system turn switches thinking on; the model then opens its reply with
     * <|channel>thought\n … <channel|> (the prompt primes an empty one when it is off) */
    .think = {"<|channel>thought", "<channel|>"},
    /* <|tool_call>call:NAME{key:<|"|>value<|"|>,n:5}<tool_call|> (the template's tool_calls
     * branch); the reply scanner and the forced-call grammar are the style's (serve/) */
    .tool_style = FAMILY_TOOLS_CALL_DICT,
    .tool_call = {"<|tool_call>", "<tool_call|>"},
    .forced_call = NULL,
    .tool_syntax = {.prefix = "call:", .quote = "<|\"|>"},
    .end_of_turn = GEMMA4_END_OF_TURN,
    /* Gemma 4's generation_config / model card: temperature 1.0, top_k 64, top_p 0.95 */
    .sampling = {.temperature = 1.0f, .top_k = 64, .top_p = 0.95f, .min_p = 0},
    .sampling_think = {.temperature = 1.0f, .top_k = 64, .top_p = 0.95f, .min_p = 0},
};
