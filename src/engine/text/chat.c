/* chat — family dispatch, prompt/message lifetime, OpenAI messages -> chat_msg, and the
 * Python-json.dumps-compatible serializer behind the templates' `tojson`. */
#include "engine/text/chat.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "engine/text/chat_internal.h"
#include "engine/text/family.h"

/* ---- family dispatch (the registry: family.c) ---- */

bool chat_template_known(const char *arch, const char *tmpl)
{
    const struct family *f = family_find(arch);
    if (!f || !tmpl) return false;
    uint64_t h = hash_fnv1a64_str(tmpl);
    for (int i = 0; i < 4 && f->templates[i]; i++)
        if (f->templates[i] == h) return true;
    return false;
}

int chat_render(const char *arch, const struct chat_msg *msgs, int n_msgs,
                const struct chat_prompt_opts *opts, struct chat_prompt *out, struct err *e)
{
    const struct family *f = family_find(arch);
    if (!f)
        return err_set(e, ERR_UNSUPPORTED, "no chat template for architecture '%s'",
                       arch ? arch : "(null)");
    static const struct chat_prompt_opts defaults = {.add_generation_prompt = true,
                                                     .enable_thinking = true};
    if (!opts) opts = &defaults;
    if (opts->tools && !json_is_array(opts->tools))
        return err_set_param(e, ERR_INVALID, "tools", "tools must be an array");
    memset(out, 0, sizeof *out);
    /* Make the text non-NULL even for an empty render. */
    if (buf_reserve(&out->text, 256))
        return err_set(e, ERR_NOMEM, "out of memory rendering the prompt");
    out->text.data[0] = 0;
    if (f->render(msgs, n_msgs, opts, out, e)) {
        chat_prompt_free(out);
        return -1;
    }
    return 0;
}

void chat_prompt_free(struct chat_prompt *p)
{
    if (!p) return;
    buf_free(&p->text);
    free(p->spans);
    p->spans = NULL;
    p->n_spans = p->cap_spans = 0;
    p->failed = false;
}

void chat_msg_free(struct chat_msg *m)
{
    if (!m) return;
    free(m->content);
    free(m->reasoning_content);
    for (int i = 0; i < m->n_tool_calls; i++) {
        free(m->tool_calls[i].id);
        free(m->tool_calls[i].name);
        free(m->tool_calls[i].arguments);
    }
    free(m->tool_calls);
    free(m->tool_call_id);
    free(m->name);
    memset(m, 0, sizeof *m);
}

void chat_msgs_free(struct chat_msg *msgs, int n)
{
    if (!msgs) return;
    for (int i = 0; i < n; i++)
        chat_msg_free(&msgs[i]);
    free(msgs);
}

/* ---- emit helpers ---- */

int chat_emit_struct(struct chat_prompt *p, const char *s)
{
    size_t n = strlen(s), off = p->text.len;
    if (n == 0 || p->failed) return p->failed ? -1 : 0;
    if (buf_append(&p->text, s, n)) {
        p->failed = true;
        return -1;
    }
    if (p->n_spans && p->spans[p->n_spans - 1].off + p->spans[p->n_spans - 1].len == off) {
        p->spans[p->n_spans - 1].len += n;
        return 0;
    }
    if (p->n_spans == p->cap_spans) {
        size_t cap = p->cap_spans ? p->cap_spans * 2 : 16;
        struct tok_span *ns = realloc(p->spans, cap * sizeof *ns);
        if (!ns) {
            p->failed = true;
            return -1;
        }
        p->spans = ns;
        p->cap_spans = cap;
    }
    p->spans[p->n_spans++] = (struct tok_span){off, n};
    return 0;
}

int chat_emit_text(struct chat_prompt *p, const char *s, size_t n)
{
    if (p->failed) return -1;
    if (n && buf_append(&p->text, s, n)) {
        p->failed = true;
        return -1;
    }
    return 0;
}

/* ---- tojson: Python json.dumps(x, ensure_ascii=False) ---- */

static int tojson_string(const char *s, size_t n, struct buf *out)
{
    if (buf_reserve(out, n + 2)) return -1;
    if (buf_append(out, "\"", 1)) return -1;
    size_t run = 0; /* start of the pending run of bytes that need no escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                esc = ubuf;
            }
        }
        if (!esc) continue;
        if (buf_append(out, s + run, i - run) || buf_puts(out, esc)) return -1;
        run = i + 1;
    }
    if (buf_append(out, s + run, n - run)) return -1;
    return buf_append(out, "\"", 1);
}

/* Python float repr: the shortest digit string that round-trips, fixed notation when the decimal
 * exponent is in [-4, 16), else d.ddde±XX. */
static int tojson_real(double d, struct buf *out);

int chat_py_float_repr(double d, struct buf *out) { return tojson_real(d, out); }

static int tojson_real(double d, struct buf *out)
{
    if (isnan(d)) return buf_puts(out, "NaN");
    if (isinf(d)) return buf_puts(out, d < 0 ? "-Infinity" : "Infinity");
    if (d == 0) return buf_puts(out, signbit(d) ? "-0.0" : "0.0");
    char tmp[48];
    for (int p = 0; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp = [-]D[.DDD]e±XX */
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') neg = true, q++;
    char dig[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < (int)sizeof dig - 1) dig[nd++] = *q;
    int exp10 = (*q == 'e') ? atoi(q + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    dig[nd] = 0;
    int decpt = exp10 + 1; /* value = 0.DIGITS x 10^decpt */
    char res[64];
    int r = 0;
    if (neg) res[r++] = '-';
    if (decpt <= -4 || decpt > 16) {
        res[r++] = dig[0];
        if (nd > 1) {
            res[r++] = '.';
            for (int i = 1; i < nd; i++)
                res[r++] = dig[i];
        }
        r +=
            snprintf(res + r, sizeof res - (size_t)r, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (decpt <= 0) {
        res[r++] = '0';
        res[r++] = '.';
        for (int i = 0; i < -decpt; i++)
            res[r++] = '0';
        for (int i = 0; i < nd; i++)
            res[r++] = dig[i];
    } else if (decpt >= nd) {
        for (int i = 0; i < nd; i++)
            res[r++] = dig[i];
        for (int i = nd; i < decpt; i++)
            res[r++] = '0';
        res[r++] = '.';
        res[r++] = '0';
    } else {
        for (int i = 0; i < decpt; i++)
            res[r++] = dig[i];
        res[r++] = '.';
        for (int i = decpt; i < nd; i++)
            res[r++] = dig[i];
    }
    return buf_append(out, res, (size_t)r);
}

int chat_tojson(const json_t *j, struct buf *out)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (buf_puts(out, "{")) return -1;
        const char *k;
        json_t *v;
        bool first = true;
        /* jansson iterates objects in insertion order (JSON_PRESERVE_ORDER is the default
         * since 2.8). */
        json_object_foreach((json_t *)j, k, v)
        {
            if (!first && buf_puts(out, ", ")) return -1;
            first = false;
            if (tojson_string(k, strlen(k), out) || buf_puts(out, ": ") || chat_tojson(v, out))
                return -1;
        }
        return buf_puts(out, "}");
    }
    case JSON_ARRAY: {
        if (buf_puts(out, "[")) return -1;
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (i && buf_puts(out, ", ")) return -1;
            if (chat_tojson(json_array_get(j, i), out)) return -1;
        }
        return buf_puts(out, "]");
    }
    case JSON_STRING:
        return tojson_string(json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER:
        return buf_printf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
    case JSON_REAL:
        return tojson_real(json_real_value(j), out);
    case JSON_TRUE:
        return buf_puts(out, "true");
    case JSON_FALSE:
        return buf_puts(out, "false");
    case JSON_NULL:
        return buf_puts(out, "null");
    }
    return -1;
}

/* ---- OpenAI messages -> chat_msg ---- */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Copies a JSON string that must not hold NUL. Returns 0, or -1 with e set. */
static int take_string(const json_t *v, const char *param, char **dst, struct err *e)
{
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (memchr(s, 0, n))
        return err_set_param(e, ERR_INVALID, param, "%s must not contain NUL characters", param);
    if (!(*dst = dup_n(s, n))) return err_set(e, ERR_NOMEM, "out of memory");
    return 0;
}

static int take_content(const json_t *c, const char *param, char **dst, struct err *e)
{
    if (!c || json_is_null(c)) {
        *dst = dup_n("", 0);
        return *dst ? 0 : err_set(e, ERR_NOMEM, "out of memory");
    }
    if (json_is_string(c)) return take_string(c, param, dst, e);
    if (!json_is_array(c))
        return err_set_param(e, ERR_INVALID, param,
                             "%s must be a string, an array of text parts, or null", param);
    struct buf b = {0};
    char sub[160];
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *part = json_array_get(c, i);
        snprintf(sub, sizeof sub, "%s[%zu]", param, i);
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            buf_free(&b);
            return err_set_param(e, ERR_INVALID, sub, "%s must be an object with a string \"type\"",
                                 sub);
        }
        const char *t = json_string_value(type);
        if (strcmp(t, "text") != 0 && strcmp(t, "input_text") != 0 &&
            strcmp(t, "output_text") != 0) {
            buf_free(&b);
            return err_set_param(e, ERR_INVALID, sub,
                                 "content part type '%s' is not supported (text only)", t);
        }
        if (!json_is_string(text)) {
            buf_free(&b);
            return err_set_param(e, ERR_INVALID, sub, "%s.text must be a string", sub);
        }
        size_t n = json_string_length(text);
        if (memchr(json_string_value(text), 0, n)) {
            buf_free(&b);
            return err_set_param(e, ERR_INVALID, sub, "%s.text must not contain NUL characters",
                                 sub);
        }
        if ((i && buf_append(&b, "\n", 1)) || buf_append(&b, json_string_value(text), n)) {
            buf_free(&b);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
    }
    if (!b.data && buf_reserve(&b, 1)) return err_set(e, ERR_NOMEM, "out of memory");
    b.data[b.len] = 0;
    *dst = buf_steal(&b);
    return 0;
}

static int take_tool_call(const json_t *tc, const char *param, struct chat_tool_call *out,
                          struct err *e)
{
    char sub[224];
    if (!json_is_object(tc))
        return err_set_param(e, ERR_INVALID, param, "%s must be an object", param);
    const json_t *id = json_object_get(tc, "id");
    if (id && !json_is_null(id)) {
        snprintf(sub, sizeof sub, "%s.id", param);
        if (!json_is_string(id))
            return err_set_param(e, ERR_INVALID, sub, "%s must be a string", sub);
        if (take_string(id, sub, &out->id, e)) return -1;
    }
    const json_t *type = json_object_get(tc, "type");
    if (type && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0)) {
        snprintf(sub, sizeof sub, "%s.type", param);
        return err_set_param(e, ERR_INVALID, sub, "%s must be \"function\"", sub);
    }
    const json_t *fn = json_object_get(tc, "function");
    if (!json_is_object(fn)) {
        snprintf(sub, sizeof sub, "%s.function", param);
        return err_set_param(e, ERR_INVALID, sub, "%s must be an object", sub);
    }
    const json_t *name = json_object_get(fn, "name");
    snprintf(sub, sizeof sub, "%s.function.name", param);
    if (!json_is_string(name))
        return err_set_param(e, ERR_INVALID, sub, "%s must be a string", sub);
    if (take_string(name, sub, &out->name, e)) return -1;
    const json_t *args = json_object_get(fn, "arguments");
    snprintf(sub, sizeof sub, "%s.function.arguments", param);
    if (json_is_string(args)) return take_string(args, sub, &out->arguments, e);
    if (json_is_object(args) || json_is_array(args)) {
        struct buf b = {0};
        if (chat_tojson(args, &b)) {
            buf_free(&b);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
        out->arguments = buf_steal(&b);
        return 0;
    }
    return err_set_param(e, ERR_INVALID, sub, "%s must be a JSON string (or an object)", sub);
}

static int take_msg(const json_t *m, size_t i, struct chat_msg *out, struct err *e)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m))
        return err_set_param(e, ERR_INVALID, param, "%s must be an object", param);
    const json_t *role = json_object_get(m, "role");
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!json_is_string(role))
        return err_set_param(e, ERR_INVALID, param, "%s must be a string", param);
    const char *r = json_string_value(role);
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        out->role = CHAT_SYSTEM;
    else if (!strcmp(r, "user"))
        out->role = CHAT_USER;
    else if (!strcmp(r, "assistant"))
        out->role = CHAT_ASSISTANT;
    else if (!strcmp(r, "tool"))
        out->role = CHAT_TOOL;
    else
        return err_set_param(e, ERR_INVALID, param, "unknown role '%s' in %s", r, param);

    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (take_content(json_object_get(m, "content"), param, &out->content, e)) return -1;

    if (out->role == CHAT_ASSISTANT) {
        const json_t *rc = json_object_get(m, "reasoning_content");
        const char *key = "reasoning_content";
        if (!rc || json_is_null(rc)) rc = json_object_get(m, "reasoning"), key = "reasoning";
        if (rc && !json_is_null(rc)) {
            snprintf(param, sizeof param, "messages[%zu].%s", i, key);
            if (!json_is_string(rc))
                return err_set_param(e, ERR_INVALID, param, "%s must be a string", param);
            if (take_string(rc, param, &out->reasoning_content, e)) return -1;
        }
        const json_t *tcs = json_object_get(m, "tool_calls");
        if (tcs && !json_is_null(tcs)) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            if (!json_is_array(tcs))
                return err_set_param(e, ERR_INVALID, param, "%s must be an array", param);
            size_t n = json_array_size(tcs);
            if (n > 1u << 20)
                return err_set_param(e, ERR_INVALID, param, "%s has too many entries", param);
            if (n) {
                out->tool_calls = calloc(n, sizeof *out->tool_calls);
                if (!out->tool_calls) return err_set(e, ERR_NOMEM, "out of memory");
                for (size_t j = 0; j < n; j++) {
                    out->n_tool_calls = (int)j + 1; /* so chat_msg_free sees the partly built one */
                    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
                    if (take_tool_call(json_array_get(tcs, j), param, &out->tool_calls[j], e))
                        return -1;
                }
            }
        }
    }
    const struct {
        const char *key;
        char **dst;
    } opt[] = {{"tool_call_id", &out->tool_call_id}, {"name", &out->name}};
    for (size_t k = 0; k < 2; k++) {
        const json_t *v = json_object_get(m, opt[k].key);
        if (!v || json_is_null(v)) continue;
        snprintf(param, sizeof param, "messages[%zu].%s", i, opt[k].key);
        if (!json_is_string(v))
            return err_set_param(e, ERR_INVALID, param, "%s must be a string", param);
        if (take_string(v, param, opt[k].dst, e)) return -1;
    }
    return 0;
}

int chat_msgs_from_openai_json(const json_t *messages, struct chat_msg **out, int *n_out,
                               struct err *e)
{
    *out = NULL;
    *n_out = 0;
    if (!json_is_array(messages))
        return err_set_param(e, ERR_INVALID, "messages", "messages must be an array");
    size_t n = json_array_size(messages);
    if (n > 1u << 24) return err_set_param(e, ERR_INVALID, "messages", "too many messages");
    struct chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs) return err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (take_msg(json_array_get(messages, i), i, &msgs[i], e)) {
            chat_msgs_free(msgs, (int)i + 1);
            return -1;
        }
    }
    *out = msgs;
    *n_out = (int)n;
    return 0;
}
