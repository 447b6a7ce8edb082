/* jsonschema_emit — the second pass of the JSON Schema compiler: lark rules for IR nodes
 * (jsonschema_ir.h). Each node becomes rules whose expression is returned; identical rule bodies
 * are emitted once; strings, numbers, arrays and objects (any-order members, extra keys) as
 * docs/jsonschema.md describes. */
#include "base/log.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "grammar/jsonschema_ir.h"

/* ------------------------------------------------------------------ output: rules */

static int rules_rehash(struct js *c)
{
    size_t nc = c->hcap ? c->hcap * 2 : 256;
    int *h = malloc(nc * sizeof *h);
    if (!h) return -1;
    for (size_t i = 0; i < nc; i++)
        h[i] = -1;
    for (int i = 0; i < c->n_rules; i++) {
        if (!c->rules[i].body) continue;
        size_t j = c->rules[i].hash & (nc - 1);
        while (h[j] >= 0)
            j = (j + 1) & (nc - 1);
        h[j] = i;
    }
    free(c->hidx);
    c->hidx = h;
    c->hcap = nc;
    return 0;
}

/* Name for a rule with this body (deduplicated). body NULL: a fresh name with no body yet (defs).
 */
static char *mk_rule(struct js *c, const char *body)
{
    if (c->oom) return NULL;
    uint64_t h = body ? hash_fnv1a64_str(body) : 0;
    if (body && c->hcap) {
        size_t j = h & (c->hcap - 1);
        while (c->hidx[j] >= 0) {
            struct rule *r = &c->rules[c->hidx[j]];
            if (r->hash == h && !strcmp(r->body, body)) return r->name;
            j = (j + 1) & (c->hcap - 1);
        }
    }
    if (c->n_rules == c->cap_rules) {
        int nc = c->cap_rules ? c->cap_rules * 2 : 64;
        struct rule *p = realloc(c->rules, (size_t)nc * sizeof *p);
        if (!p) {
            c->oom = true;
            return NULL;
        }
        c->rules = p;
        c->cap_rules = nc;
    }
    if ((size_t)(c->n_rules + 1) * 2 > c->hcap && rules_rehash(c)) {
        c->oom = true;
        return NULL;
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%sr%d", c->prefix, c->n_rules);
    struct rule *r = &c->rules[c->n_rules];
    r->name = js_strdup(c, nm, strlen(nm));
    r->body = body ? js_strdup(c, body, strlen(body)) : NULL;
    r->hash = h;
    if (!r->name || (body && !r->body)) return NULL;
    if (body) {
        size_t j = h & (c->hcap - 1);
        while (c->hidx[j] >= 0)
            j = (j + 1) & (c->hcap - 1);
        c->hidx[j] = c->n_rules;
        if (buf_printf(&c->out, "%s: %s\n", r->name, body)) c->oom = true;
        if (c->out.len > JS_MAX_OUT) {
            err_set(c->e, ERR_INVALID, "schema produces a grammar over %u MB", JS_MAX_OUT >> 20);
            c->oom = true;
        }
    }
    c->n_rules++;
    return r->name;
}

static char *mk_rule_buf(struct js *c, struct buf *b)
{
    char *r = mk_rule(c, b->data ? b->data : "");
    buf_free(b);
    return r;
}

static char *mk_regex_rule(struct js *c, const char *rx)
{
    struct buf b = {0};
    buf_printf(&b, "/%s/", rx);
    return mk_rule_buf(c, &b);
}

/* lark string literal for raw bytes (JSON text) */
static void lark_lit(struct buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\')
            buf_printf(b, "\\%c", s[i]);
        else
            buf_append(b, &s[i], 1);
    }
    buf_puts(b, "\"");
}

static const char *r_ws(struct js *c)
{
    if (!c->r_ws) c->r_ws = mk_regex_rule(c, WS_RX);
    return c->r_ws;
}
/* The optional gap after `{ [` and before `} ]`: "rN?" in pretty mode, else nothing. */
static const char *r_wso(struct js *c)
{
    if (c->ws != WS_PRETTY) return "";
    if (!c->wso[0]) {
        const char *w = r_ws(c);
        if (w) snprintf(c->wso, sizeof c->wso, "%s?", w);
    }
    return c->wso;
}
static const char *r_comma(struct js *c)
{
    if (!c->r_comma) {
        if (c->ws == WS_TIDY) {
            c->r_comma = mk_regex_rule(c, ", ?");
        } else if (c->ws == WS_COMPACT) {
            c->r_comma = mk_regex_rule(c, ",");
        } else {
            struct buf b = {0};
            const char *w = r_ws(c);
            buf_printf(&b, "%s? \",\" %s?", w, w);
            c->r_comma = mk_rule_buf(c, &b);
        }
    }
    return c->r_comma;
}
static const char *r_colon(struct js *c)
{
    if (!c->r_colon) {
        if (c->ws == WS_TIDY) {
            c->r_colon = mk_regex_rule(c, ": ?");
        } else if (c->ws == WS_COMPACT) {
            c->r_colon = mk_regex_rule(c, ":");
        } else {
            struct buf b = {0};
            const char *w = r_ws(c);
            buf_printf(&b, "%s? \":\" %s?", w, w);
            c->r_colon = mk_rule_buf(c, &b);
        }
    }
    return c->r_colon;
}
static const char *r_str(struct js *c)
{
    if (!c->r_str) c->r_str = mk_regex_rule(c, "\"" JSRX_CHAR "*\"");
    return c->r_str;
}
static const char *r_num(struct js *c)
{
    if (!c->r_num) {
        struct buf b = {0};
        jsrx_number(NULL, false, NULL, false, false, -1, &b);
        c->r_num = mk_regex_rule(c, b.data);
        buf_free(&b);
    }
    return c->r_num;
}

/* any JSON value: value / object / array rules (mutually recursive, named up front) */
static const char *r_value(struct js *c)
{
    if (c->r_value) return c->r_value;
    c->r_value = mk_rule(c, NULL);
    c->r_obj = mk_rule(c, NULL);
    c->r_arr = mk_rule(c, NULL);
    if (c->oom) return NULL;
    const char *w = r_wso(c), *cm = r_comma(c), *cl = r_colon(c), *s = r_str(c), *n = r_num(c);
    buf_printf(&c->out, "%s: %s | %s | %s | %s | \"true\" | \"false\" | \"null\"\n", c->r_value,
               c->r_obj, c->r_arr, s, n);
    buf_printf(&c->out, "%s: \"{\" %s \"}\" | \"{\" %s %s %s %s (%s %s %s %s)* %s \"}\"\n",
               c->r_obj, w, w, s, cl, c->r_value, cm, s, cl, c->r_value, w);
    buf_printf(&c->out, "%s: \"[\" %s \"]\" | \"[\" %s %s (%s %s)* %s \"]\"\n", c->r_arr, w, w,
               c->r_value, cm, c->r_value, w);
    return c->r_value;
}

/* ------------------------------------------------------------------ emission */

char *js_emit(struct js *c, struct sn *s);
static char *emit_string_auto(struct js *c, struct sn *s, const char *const *pats, int np,
                              bool len);

/* JSON text of a value, canonical (compact; strings escaped minimally). Numbers: each real that
 * is integral is also accepted in integer form, written as alternatives by the caller. */
static void json_str_text(struct buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"':
            buf_puts(b, "\\\"");
            break;
        case '\\':
            buf_puts(b, "\\\\");
            break;
        case '\b':
            buf_puts(b, "\\b");
            break;
        case '\f':
            buf_puts(b, "\\f");
            break;
        case '\n':
            buf_puts(b, "\\n");
            break;
        case '\r':
            buf_puts(b, "\\r");
            break;
        case '\t':
            buf_puts(b, "\\t");
            break;
        default:
            if (ch < 0x20)
                buf_printf(b, "\\u%04x", ch);
            else
                buf_append(b, &s[i], 1);
        }
    }
    buf_puts(b, "\"");
}

/* lark expression for one JSON value; whitespace allowed inside arrays/objects */
static void value_expr(struct js *c, struct buf *b, json_t *v)
{
    struct buf t = {0};
    switch (json_typeof(v)) {
    case JSON_NULL:
        buf_puts(b, "\"null\"");
        break;
    case JSON_TRUE:
        buf_puts(b, "\"true\"");
        break;
    case JSON_FALSE:
        buf_puts(b, "\"false\"");
        break;
    case JSON_INTEGER:
        buf_printf(&t, "%lld", (long long)json_integer_value(v));
        lark_lit(b, t.data, t.len);
        break;
    case JSON_REAL: {
        double x = json_real_value(v);
        if (x == floor(x) && fabs(x) < 1e15) {
            buf_printf(&t, "%.0f", x);
            buf_puts(b, "(");
            lark_lit(b, t.data, t.len);
            buf_puts(b, " | ");
            buf_puts(&t, ".0");
            lark_lit(b, t.data, t.len);
            buf_puts(b, ")");
        } else {
            char tmp[64];
            for (int p = 1; p <= 17; p++) {
                snprintf(tmp, sizeof tmp, "%.*g", p, x);
                if (strtod(tmp, NULL) == x) break;
            }
            lark_lit(b, tmp, strlen(tmp));
        }
        break;
    }
    case JSON_STRING:
        json_str_text(&t, json_string_value(v), json_string_length(v));
        lark_lit(b, t.data, t.len);
        break;
    case JSON_ARRAY: {
        const char *w = r_wso(c), *cm = r_comma(c);
        if (json_array_size(v) == 0) {
            buf_printf(b, "\"[\" %s \"]\"", w);
            break;
        }
        buf_printf(b, "\"[\" %s ", w);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (i) buf_printf(b, " %s ", cm);
            value_expr(c, b, x);
        }
        buf_printf(b, " %s \"]\"", w);
        break;
    }
    case JSON_OBJECT: {
        const char *w = r_wso(c), *cm = r_comma(c), *cl = r_colon(c);
        if (json_object_size(v) == 0) {
            buf_printf(b, "\"{\" %s \"}\"", w);
            break;
        }
        buf_printf(b, "\"{\" %s ", w);
        int i = 0;
        void *it = json_object_iter(v);
        while (it) {
            if (i++) buf_printf(b, " %s ", cm);
            buf_reset(&t);
            json_str_text(&t, json_object_iter_key(it), json_object_iter_key_len(it));
            lark_lit(b, t.data, t.len);
            buf_printf(b, " %s ", cl);
            value_expr(c, b, json_object_iter_value(it));
            it = json_object_iter_next(v, it);
        }
        buf_printf(b, " %s \"}\"", w);
        break;
    }
    }
    buf_free(&t);
}

static char *emit_enum(struct js *c, struct sn *s)
{
    struct buf b = {0};
    int n = 0;
    size_t i;
    json_t *x;
    json_array_foreach(s->enumv, i, x)
    {
        struct sn tmp = *s;
        tmp.enumv = NULL;
        if (!js_value_ok(c, &tmp, x, 0)) continue;
        if (n++) buf_puts(&b, " | ");
        value_expr(c, &b, x);
    }
    if (!n) {
        buf_free(&b);
        return NULL;
    }
    return mk_rule_buf(c, &b);
}

/* 1 if mult = 10^-k (k >= 0), setting *k */
static bool mult_pow10(const struct jsrx_dec *m, int *k)
{
    if (!strcmp(m->ip, "1") && !m->fp[0]) {
        *k = 0;
        return true;
    }
    if (strcmp(m->ip, "0")) return false;
    size_t n = strlen(m->fp);
    for (size_t i = 0; i + 1 < n; i++)
        if (m->fp[i] != '0') return false;
    if (n == 0 || m->fp[n - 1] != '1') return false;
    *k = (int)n;
    return true;
}

/* number / integer alternative; NULL + no error when the range is empty */
/* Both bounds and a multipleOf that is not a power of ten: enumerate the multiples (exact decimal
 * arithmetic on m scaled to an integer). Each value is written in every JSON spelling of it:
 * trailing fraction zeros, and `.0…` for integral values of type number. 1 = not applicable. */
static int enum_multiples(struct js *c, struct sn *s, bool integer, struct buf *rx)
{
    const struct jsrx_dec *m = s->mult;
    size_t f = strlen(m->fp);
    char md[820];
    if (strlen(m->ip) + f > 17 || !s->lo || !s->hi) return 1;
    snprintf(md, sizeof md, "%s%s", m->ip, m->fp);
    long long M = atoll(md);
    char ls[820], hs[820];
    snprintf(ls, sizeof ls, "%s%s.%s", s->lo->neg ? "-" : "", s->lo->ip, s->lo->fp);
    snprintf(hs, sizeof hs, "%s%s.%s", s->hi->neg ? "-" : "", s->hi->ip, s->hi->fp);
    double lo = strtod(ls, NULL), hi = strtod(hs, NULL), md_ = (double)M / pow(10, (double)f);
    if (!(M > 0) || !isfinite(lo) || !isfinite(hi) || (hi - lo) / md_ > JS_MAX_ENUM_MULTIPLES)
        return 1;
    long long k0 = (long long)floor(lo / md_) - 1, k1 = (long long)ceil(hi / md_) + 1;
    if (llabs(k0) > (1LL << 52) / (M ? M : 1) || llabs(k1) > (1LL << 52) / (M ? M : 1)) return 1;
    int cnt = 0;
    for (long long k = k0; k <= k1; k++) {
        long long v = k * M, av = v < 0 ? -v : v;
        char ip[32], fp[32], t[80];
        long long p10 = 1;
        for (size_t i = 0; i < f; i++)
            p10 *= 10;
        snprintf(ip, sizeof ip, "%lld", av / p10);
        snprintf(fp, sizeof fp, "%0*lld", (int)f, f ? av % p10 : 0);
        size_t fl = f ? strlen(fp) : 0;
        while (fl && fp[fl - 1] == '0')
            fl--;
        fp[fl] = 0;
        snprintf(t, sizeof t, "%s%s%s%s", v < 0 ? "-" : "", ip, fl ? "." : "", fp);
        struct jsrx_dec d;
        if (jsrx_dec_parse(t, &d)) return 1;
        int c1 = jsrx_dec_cmp(&d, s->lo), c2 = jsrx_dec_cmp(&d, s->hi);
        if (c1 < 0 || (c1 == 0 && s->lo_excl) || c2 > 0 || (c2 == 0 && s->hi_excl)) continue;
        if (integer && fl) continue;
        if (++cnt > JS_MAX_ENUM_MULTIPLES) return 1;
        buf_puts(rx, cnt > 1 ? "|" : "(?:");
        if (v == 0)
            buf_puts(rx, "-?");
        else if (v < 0)
            buf_puts(rx, "-");
        buf_puts(rx, ip);
        if (fl)
            buf_printf(rx, "\\.%s0*", fp);
        else if (!integer)
            buf_puts(rx, "(?:\\.0+)?");
    }
    if (!cnt) return 2;
    buf_puts(rx, ")");
    (void)c;
    return 0;
}

static char *emit_number(struct js *c, struct sn *s, bool integer)
{
    struct buf rx = {0};
    int max_frac = -1;
    int pk;
    if (s->mult && !mult_pow10(s->mult, &pk) && s->lo && s->hi) {
        int r = enum_multiples(c, s, integer, &rx);
        if (r == 2) {
            buf_free(&rx);
            return NULL; /* no multiple in range */
        }
        if (r == 0) {
            char *name = mk_regex_rule(c, rx.data);
            buf_free(&rx);
            return name;
        }
        buf_reset(&rx);
    }
    if (s->mult) {
        int k;
        if (mult_pow10(s->mult, &k)) {
            if (k == 0)
                integer = true;
            else
                max_frac = k;
        } else if (!s->mult->fp[0] || integer) {
            /* integer multiples of M: an integer m, or m = P / 10^f with type integer (x is a
             * multiple iff x 10^f is one of P: M = P / gcd(P, 10^f)) */
            char md[820];
            snprintf(md, sizeof md, "%s%s", s->mult->ip, s->mult->fp);
            const char *mp = md;
            while (mp[0] == '0' && mp[1])
                mp++;
            if (strlen(mp) > 17) {
                err_set(c->e, ERR_UNSUPPORTED, "multipleOf %s is too large", md);
                return NULL;
            }
            long long m = atoll(mp);
            for (size_t i = 0, f = strlen(s->mult->fp); i < f; i++) {
                if (m % 2 == 0) m /= 2;
                if (m % 5 == 0) m /= 5;
            }
            int r = jsrx_int_multiples(m, s->lo, s->lo_excl, s->hi, s->hi_excl,
                                       !integer && !s->mult->fp[0], &rx, c->e);
            if (r) {
                buf_free(&rx);
                return NULL; /* r == 1: no multiple in range */
            }
            char *name = mk_regex_rule(c, rx.data);
            buf_free(&rx);
            return name;
        } else {
            err_set(c->e, ERR_UNSUPPORTED,
                    "multipleOf %s%s%s is supported only for integers and powers of ten",
                    s->mult->ip, s->mult->fp[0] ? "." : "", s->mult->fp);
            return NULL;
        }
    }
    if (jsrx_number(s->lo, s->lo_excl, s->hi, s->hi_excl, integer, max_frac, &rx) == 1) {
        buf_free(&rx);
        return NULL;
    }
    char *r = mk_regex_rule(c, rx.data);
    buf_free(&rx);
    return r;
}

static bool not_has(const struct sn *s, json_t *v)
{
    size_t i;
    json_t *x;
    if (s->not_enum) json_array_foreach(s->not_enum, i, x) if (json_equal(x, v)) return true;
    return false;
}

static char *emit_string(struct js *c, struct sn *s)
{
    int nstr = 0;
    if (s->not_enum) {
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x) if (json_is_string(x)) nstr++;
    }
    if (nstr) { /* strings other than the excluded ones */
        if (s->pattern || s->format || s->min_len > 0 || s->max_len >= 0) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "unsupported keyword \"not\" (excluded strings together with "
                    "pattern/format/length)");
            return NULL;
        }
        const char **names = js_alloc(c, (size_t)nstr * sizeof *names);
        size_t *lens = js_alloc(c, (size_t)nstr * sizeof *lens);
        if (c->oom) return NULL;
        int k = 0;
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x) if (json_is_string(x))
        {
            names[k] = json_string_value(x);
            lens[k++] = json_string_length(x);
        }
        struct buf rx = {0};
        if (jsrx_key_not_in(names, lens, nstr, &rx, c->e)) {
            buf_free(&rx);
            return NULL;
        }
        char *r = mk_regex_rule(c, rx.data);
        buf_free(&rx);
        return r;
    }
    if (s->max_len >= 0 && s->min_len > s->max_len) return NULL;
    struct buf rx = {0};
    bool len = s->min_len > 0 || s->max_len >= 0;
    if (s->format && len && !s->pattern) {
        /* formats of bounded length: drop length bounds they already imply */
        static const struct {
            const char *f;
            int64_t mn, mx;
        } fl[] = {{"date", 10, 10}, {"uuid", 36, 36}, {"ipv4", 7, 15},
                  {"ipv6", 2, 45},  {"time", 9, -1},  {"date-time", 20, -1}};
        for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
            if (!strcmp(fl[i].f, s->format) && fl[i].mn >= s->min_len &&
                (s->max_len < 0 || (fl[i].mx >= 0 && fl[i].mx <= s->max_len)))
                len = false;
    }
    if (s->format && s->pattern) {
        /* both: the intersection, built on the automaton (then the length bounds) */
        struct buf fe = {0};
        if (jsrx_format_ecma(s->format, &fe, c->e)) {
            buf_free(&fe);
            return NULL;
        }
        const char *pats[2] = {s->pattern, fe.data};
        char *r = emit_string_auto(c, s, pats, 2, len);
        buf_free(&fe);
        return r;
    }
    if (s->format) {
        buf_puts(&rx, "\"");
        if (len) { /* the format's regex intersected with the length bounds */
            struct buf body = {0};
            if (jsrx_format_ticked(s->format, &body, c->e)) {
                buf_free(&body);
                buf_free(&rx);
                return NULL;
            }
            jsrx_len_region(&rx, s->min_len, s->max_len, body.data);
            buf_free(&body);
        } else if (jsrx_format(s->format, &rx, c->e)) {
            buf_free(&rx);
            return NULL;
        }
        buf_puts(&rx, "\"");
    } else if (s->pattern) {
        struct jsrx_single one = {0};
        struct buf body = {0};
        if (jsrx_pattern(s->pattern, strlen(s->pattern), &body, len ? &one : NULL, c->e)) {
            buf_free(&body);
            buf_free(&one.set);
            buf_free(&one.notset);
            buf_free(&rx);
            /* what the translation cannot write (anchors inside alternatives, …) the automaton
             * may; if it cannot either, the translation's message stands */
            struct err first = *c->e;
            c->e->msg[0] = 0;
            c->e->code = ERR_OK;
            const char *pats[1] = {s->pattern};
            char *r = emit_string_auto(c, s, pats, 1, len);
            if (!r && c->e->msg[0]) *c->e = first;
            return r;
        }
        if (len && !one.ok && one.anchored && one.mn >= s->min_len &&
            (s->max_len < 0 || (one.mx >= 0 && one.mx <= s->max_len)))
            len = false; /* the pattern already implies the length bounds */
        if (len && !one.ok && !one.anchored && one.mn == one.mx && one.mx == s->max_len &&
            one.mn >= s->min_len && !strpbrk(s->pattern, "^$")) {
            /* a match is as long as the whole string may be: the string IS the match */
            struct buf anch = {0};
            buf_printf(&anch, "^(?:%s)$", s->pattern);
            buf_reset(&body);
            int r = jsrx_pattern(anch.data, anch.len, &body, NULL, c->e);
            buf_free(&anch);
            if (r) {
                buf_free(&body);
                buf_free(&one.set);
                buf_free(&one.notset);
                buf_free(&rx);
                return NULL;
            }
            len = false;
        }
        if (len) {
            if (!one.ok) { /* the pattern intersected with the length bounds */
                buf_free(&body);
                buf_free(&one.set);
                buf_free(&one.notset);
                buf_puts(&rx, "\"");
                if (jsrx_pattern_len(s->pattern, strlen(s->pattern), s->min_len, s->max_len, &rx,
                                     c->e)) {
                    buf_free(&rx);
                    return NULL;
                }
                buf_puts(&rx, "\"");
                char *r = mk_regex_rule(c, rx.data);
                buf_free(&rx);
                return r;
            }
            int64_t lo = one.lo > s->min_len ? one.lo : s->min_len;
            int64_t hi = one.hi;
            if (s->max_len >= 0 && (hi < 0 || s->max_len < hi)) hi = s->max_len;
            if (hi >= 0 && lo > hi) {
                buf_free(&body);
                buf_free(&one.set);
                buf_free(&one.notset);
                return NULL;
            }
            if (hi < 0)
                buf_printf(&rx, "\"%s{%lld,}\"", one.set.data, (long long)lo);
            else
                buf_printf(&rx, "\"%s{%lld,%lld}\"", one.set.data, (long long)lo, (long long)hi);
        } else
            buf_printf(&rx, "\"%s\"", body.data);
        buf_free(&body);
        buf_free(&one.set);
        buf_free(&one.notset);
    } else if (len) {
        if (s->max_len < 0)
            buf_printf(&rx, "\"" JSRX_CHAR "{%lld,}\"", (long long)s->min_len);
        else
            buf_printf(&rx, "\"" JSRX_CHAR "{%lld,%lld}\"", (long long)s->min_len,
                       (long long)s->max_len);
    } else {
        buf_free(&rx);
        return (char *)r_str(c);
    }
    char *r = mk_regex_rule(c, rx.data);
    buf_free(&rx);
    return r;
}

/* A string matching every pattern of pats (unanchored ECMA) and s's length bounds when `len`,
 * through the automaton of jsonschema_keys.c. NULL without an error: no string can. */
static char *emit_string_auto(struct js *c, struct sn *s, const char *const *pats, int np,
                              bool len)
{
    struct buf body = {0}, rx = {0};
    int r = jsk_intersect_regex("pattern", pats, np, len ? JSK_TICK : 0, &body, c->e);
    if (r) {
        buf_free(&body);
        return NULL;
    }
    buf_puts(&rx, "\"");
    if (len)
        jsrx_len_region(&rx, s->min_len, s->max_len, body.data ? body.data : "");
    else
        buf_append(&rx, body.data ? body.data : "", body.len);
    buf_puts(&rx, "\"");
    buf_free(&body);
    char *rule = mk_regex_rule(c, rx.data);
    buf_free(&rx);
    return rule;
}

/* "contains": at least one element matches; other elements match items */
static char *emit_contains(struct js *c, struct sn *s)
{
    if (s->n_prefix || s->max_items >= 0 || s->min_items > 1) {
        err_set(c->e, ERR_UNSUPPORTED,
                "\"contains\" together with prefixItems/maxItems/minItems > 1 is not supported");
        return NULL;
    }
    struct sn *y = js_intersect(c, s->items ? s->items : sn_new(c, JT_ALL), s->contains);
    if (!y) return NULL;
    const char *ye = js_emit(c, y);
    if (!ye) return NULL; /* nothing can be contained: unsatisfiable (or error set) */
    const char *xe = s->items ? js_emit(c, s->items) : r_value(c);
    if (!xe && c->e->msg[0]) return NULL;
    const char *w = r_wso(c), *cm = r_comma(c);
    struct buf b = {0};
    if (xe)
        buf_printf(&b, "\"[\" %s (%s %s)* %s (%s %s)* %s \"]\"", w, xe, cm, ye, cm, xe, w);
    else
        buf_printf(&b, "\"[\" %s %s %s \"]\"", w, ye, w);
    return mk_rule_buf(c, &b);
}

static char *emit_array(struct js *c, struct sn *s)
{
    if (s->contains) return emit_contains(c, s);
    int64_t mn = s->min_items, mx = s->max_items;
    int k = s->n_prefix;
    const char *pe[k + 1];
    for (int i = 0; i < k; i++) {
        pe[i] = js_emit(c, s->prefix[i]);
        if (!pe[i]) {
            if (c->e->msg[0]) return NULL;
            /* unsatisfiable position: the array must end before it */
            if (mx < 0 || mx > i) mx = i;
            k = i;
            break;
        }
    }
    const char *ie = NULL;
    if (!s->items)
        ie = r_value(c);
    else {
        ie = js_emit(c, s->items);
        if (!ie && c->e->msg[0]) return NULL;
    }
    if (!ie && (mx < 0 || mx > k)) mx = k;
    if (mx >= 0 && mn > mx) return NULL;
    const char *w = r_wso(c), *cm = r_comma(c);
    struct buf b = {0};
    /* tail from index i (each element preceded by a comma) */
    struct buf tail = {0};
    /* build from the end: elements >= k */
    if (ie && (mx < 0 || mx > k)) {
        int64_t lo = mn > k ? mn - k : 0; /* elements after the prefix */
        int64_t hi = mx < 0 ? -1 : mx - k;
        /* when k == 0 the first of them has no leading comma: handled below */
        if (k > 0) {
            if (hi < 0 && lo == 0)
                buf_printf(&tail, "(%s %s)*", cm, ie);
            else if (hi < 0 && lo == 1)
                buf_printf(&tail, "(%s %s)+", cm, ie);
            else if (hi < 0)
                buf_printf(&tail, "(%s %s){%lld,}", cm, ie, (long long)lo);
            else
                buf_printf(&tail, "(%s %s){%lld,%lld}", cm, ie, (long long)lo, (long long)hi);
        }
    }
    for (int i = k - 1; i >= 1; i--) {
        struct buf t = {0};
        if (i < mn)
            buf_printf(&t, "%s %s %s", cm, pe[i], tail.data ? tail.data : "");
        else
            buf_printf(&t, "(%s %s %s)?", cm, pe[i], tail.data ? tail.data : "");
        buf_free(&tail);
        tail = t;
    }
    /* first element */
    struct buf first = {0};
    bool empty_ok = mn == 0;
    if (k > 0)
        buf_printf(&first, "%s %s", pe[0], tail.data ? tail.data : "");
    else if (ie && (mx < 0 || mx > 0)) {
        int64_t lo = mn > 1 ? mn - 1 : 0, hi = mx < 0 ? -1 : mx - 1;
        if (hi < 0 && lo == 0)
            buf_printf(&first, "%s (%s %s)*", ie, cm, ie);
        else if (hi == 0)
            buf_printf(&first, "%s", ie);
        else if (hi < 0)
            buf_printf(&first, "%s (%s %s){%lld,}", ie, cm, ie, (long long)lo);
        else
            buf_printf(&first, "%s (%s %s){%lld,%lld}", ie, cm, ie, (long long)lo, (long long)hi);
    }
    buf_free(&tail);
    if (!first.len && !empty_ok) {
        buf_free(&first);
        return NULL;
    }
    if (empty_ok) buf_printf(&b, "\"[\" %s \"]\"", w);
    if (first.len)
        buf_printf(&b, "%s\"[\" %s %s %s \"]\"", empty_ok ? " | " : "", w, first.data, w);
    buf_free(&first);
    return mk_rule_buf(c, &b);
}

static bool universal_pattern(const char *p)
{
    /* (`^.*$` is not among them: `.` excludes line terminators, so it misses "a\nb") */
    static const char *const u[] = {"", ".*", "^.*", ".*$", "(.*)", "^(.*)", "(.*)$", NULL};
    return js_in_list(u, p);
}

/* Declared members in any order, each at most once, the required ones enforced, extras (x, keys
 * other than the declared ones) anywhere between them. One rule per set S of members still
 * available (so at most 2^JS_ANYORDER_MAX sets):
 *     R(S) = (, x)* T(S)        the rest of the object, each member after a comma
 *     T(S) = , v_i R(S - i) | … (i in S)  | ε when S holds no required member
 *     F    = v_i R(all - i) | … | x R(all)  a non-empty member list
 * Keys are distinct literals, so the parse stays deterministic in S: one Earley item per set. */
/* Dependencies between members (dependentRequired): member dep[2k] present => dep[2k+1]. */
struct deps {
    const int *pair;
    int n;
    /* minProperties / maxProperties over the members when no extra member can appear (the
     * count is n - |S|): lo 0 and hi -1 when there are none */
    int64_t lo, hi;
};
/* a set from which the object cannot be completed (a required member left, the count at
 * maxProperties): callers drop the alternative leading there */
static const char AO_DEAD[] = "\x01";

static const char *any_order_rest(struct js *c, int n, const char *const *vals, const bool *reqd,
                                  const char *x, uint32_t S, char **memo, const struct deps *dp)
{
    if (memo[S]) return memo[S];
    const char *cm = r_comma(c);
    struct buf b = {0};
    bool need = false;
    int alts = 0;
    struct buf t = {0};
    int count = n - __builtin_popcount(S);
    bool room = dp->hi < 0 || count < dp->hi;
    for (int i = 0; i < n; i++) {
        if (!(S >> i & 1)) continue;
        if (reqd[i]) need = true;
        if (!room) continue;
        const char *rest = any_order_rest(c, n, vals, reqd, x, S & ~(1u << i), memo, dp);
        if (c->oom) {
            buf_free(&t);
            return NULL;
        }
        if (rest == AO_DEAD) continue;
        buf_printf(&t, "%s%s %s%s%s", alts++ ? " | " : "", cm, vals[i], rest[0] ? " " : "", rest);
    }
    /* the object may end here only if every present member's dependents are present too */
    for (int k = 0; k < dp->n; k++)
        if (!(S >> dp->pair[2 * k] & 1) && (S >> dp->pair[2 * k + 1] & 1)) need = true;
    if (count < dp->lo) need = true;
    if (need && !alts) {
        buf_free(&t);
        memo[S] = (char *)AO_DEAD;
        return memo[S];
    }
    if (x) buf_printf(&b, "(%s %s)* ", cm, x);
    if (alts) buf_printf(&b, need ? "(%s)" : "(%s)?", t.data);
    buf_free(&t);
    /* an empty body (no set left, no extras) is the empty string: callers skip it */
    if (!b.len) {
        memo[S] = "";
        return memo[S];
    }
    memo[S] = mk_rule_buf(c, &b);
    return memo[S] ? memo[S] : "";
}

static char *emit_object_any_order(struct js *c, int n, const char *const *vals, const bool *reqd,
                                   const char *x, bool nonempty, const struct deps *dp)
{
    char **memo = js_alloc(c, ((size_t)1 << n) * sizeof *memo);
    if (!memo) return NULL;
    memset(memo, 0, ((size_t)1 << n) * sizeof *memo);
    uint32_t all = (1u << n) - 1;
    struct buf f = {0};
    bool any_req = false;
    for (int i = 0; i < n && dp->hi != 0; i++) {
        if (reqd[i]) any_req = true;
        const char *rest = any_order_rest(c, n, vals, reqd, x, all & ~(1u << i), memo, dp);
        if (c->oom) {
            buf_free(&f);
            return NULL;
        }
        if (rest == AO_DEAD) continue;
        buf_printf(&f, "%s%s%s%s", f.len ? " | " : "", vals[i], rest[0] ? " " : "", rest);
    }
    for (int i = 0; i < n; i++)
        if (reqd[i]) any_req = true;
    if (x) {
        const char *rest = any_order_rest(c, n, vals, reqd, x, all, memo, dp);
        if (c->oom) {
            buf_free(&f);
            return NULL;
        }
        if (rest != AO_DEAD)
            buf_printf(&f, "%s%s%s%s", f.len ? " | " : "", x, rest[0] ? " " : "", rest);
    }
    const char *w = r_wso(c);
    struct buf ob = {0};
    bool empty_ok = !any_req && !nonempty && dp->lo <= 0;
    if (!f.len) { /* no member can start the object */
        if (!empty_ok) return NULL;
        buf_printf(&ob, "\"{\" %s \"}\"", w);
        return mk_rule_buf(c, &ob);
    }
    const char *first = mk_rule_buf(c, &f);
    if (!first) return NULL;
    if (empty_ok) buf_printf(&ob, "\"{\" %s \"}\" | ", w);
    buf_printf(&ob, "\"{\" %s %s %s \"}\"", w, first, w);
    return mk_rule_buf(c, &ob);
}

/* Extra members of an object with patternProperties (docs/jsonschema.md "patternProperties"):
 * the keys that are not declared names, by the set Q of patterns they match, take the
 * intersection of those patterns' schemas (Q empty: additionalProperties). Classes whose
 * schemas are the same rule share one key regex. Appends `key : value` alternatives to xb. */
static int emit_keys_general(struct js *c, struct sn *s, const char *const *names,
                             const size_t *lens, int n_names, struct buf *xb)
{
    struct jsk k;
    if (jsk_build(&k, "patternProperties", s->ppat, s->n_ppat, names, lens, n_names, c->e))
        return -1;
    int rc = -1;
    const char **vr = js_alloc(c, ((size_t)k.n_masks + 1) * sizeof *vr);
    bool *sel = js_alloc(c, (size_t)k.n_masks + 1);
    bool *done = js_alloc(c, (size_t)k.n_masks + 1);
    if (c->oom) goto out;
    const char *cl = r_colon(c);
    for (int m = 0; m < k.n_masks; m++) {
        struct sn *v = NULL;
        bool any = true;
        if (!k.masks[m]) {
            v = s->addl;
            any = !v;
        } else
            for (int j = 0; j < s->n_ppat; j++) {
                if (!(k.masks[m] >> j & 1)) continue;
                v = any ? s->ppsch[j] : js_intersect(c, v, s->ppsch[j]);
                any = false;
                if (!v) goto out;
            }
        vr[m] = any ? r_value(c) : js_emit(c, v);
        if (!vr[m] && c->e->msg[0]) goto out;
        done[m] = false;
    }
    for (int m = 0; m < k.n_masks; m++) {
        if (!vr[m] || done[m]) continue; /* (no value fits: such keys cannot appear) */
        for (int j = 0; j < k.n_masks; j++) {
            sel[j] = vr[j] && !done[j] && !strcmp(vr[j], vr[m]);
            if (sel[j]) done[j] = true;
        }
        struct buf key = {0};
        int r = jsk_regex(&k, sel, 0, &key, c->e);
        if (r < 0) {
            buf_free(&key);
            goto out;
        }
        if (r == 0) {
            const char *kr = mk_regex_rule(c, key.data);
            buf_free(&key);
            if (!kr) goto out;
            buf_printf(xb, "%s%s %s %s", xb->len ? " | " : "", kr, cl, vr[m]);
        }
    }
    rc = 0;
out:
    jsk_free(&k);
    return rc;
}

static char *emit_object(struct js *c, struct sn *s)
{
    int nd = s->n_props;
    /* entries: declared properties then required-but-undeclared ones */
    int cap = nd + s->n_req + 1;
    const char **names = js_alloc(c, (size_t)cap * sizeof *names);
    size_t *lens = js_alloc(c, (size_t)cap * sizeof *lens);
    const char **vals = js_alloc(c, (size_t)cap * sizeof *vals);
    bool *reqd = js_alloc(c, (size_t)cap * sizeof *reqd);
    if (c->oom) return NULL;
    int n = 0, n_req = 0;
    const char **all_names = js_alloc(c, (size_t)cap * sizeof *all_names);
    size_t *all_lens = js_alloc(c, (size_t)cap * sizeof *all_lens);
    int n_all = 0;
    if (c->oom) return NULL;
    for (int i = 0; i < nd + s->n_req; i++) {
        const char *nm;
        size_t ln;
        struct sn *sc;
        if (i < nd) {
            nm = s->pnames[i];
            ln = s->plens[i];
            sc = s->pschemas[i];
            /* every patternProperties schema whose pattern matches the name applies too */
            for (int j = 0; j < s->n_ppat && sc; j++) {
                int m = js_pattern_matches(s->ppat[j], nm, ln);
                if (m < 0) {
                    err_set(c->e, ERR_INVALID, "patternProperties: bad pattern /%.100s/",
                            s->ppat[j]);
                    return NULL;
                }
                if (m) sc = js_intersect(c, sc, s->ppsch[j]);
            }
            if (!sc) return NULL;
        } else {
            nm = s->req[i - nd];
            ln = strlen(nm);
            bool seen = false;
            for (int j = 0; j < nd; j++)
                if (s->plens[j] == ln && !memcmp(s->pnames[j], nm, ln)) seen = true;
            if (seen) continue;
            sc = NULL;
            bool matched = false;
            for (int j = 0; j < s->n_ppat; j++) {
                int m = js_pattern_matches(s->ppat[j], nm, ln);
                if (m < 0) {
                    err_set(c->e, ERR_INVALID, "patternProperties: bad pattern /%.100s/",
                            s->ppat[j]);
                    return NULL;
                }
                if (!m) continue;
                sc = matched ? js_intersect(c, sc, s->ppsch[j]) : s->ppsch[j];
                matched = true;
                if (!sc) return NULL;
            }
            if (!matched) sc = s->addl;
        }
        bool rq = false;
        for (int j = 0; j < s->n_req; j++)
            if (strlen(s->req[j]) == ln && !memcmp(s->req[j], nm, ln)) rq = true;
        all_names[n_all] = nm;
        all_lens[n_all++] = ln;
        const char *ve = sc ? js_emit(c, sc) : r_value(c);
        if (!ve) {
            if (c->e->msg[0]) return NULL;
            if (rq) return NULL; /* required property cannot have any value */
            continue;
        }
        struct buf t = {0}, kv = {0};
        json_str_text(&t, nm, ln);
        lark_lit(&kv, t.data, t.len);
        buf_printf(&kv, " %s %s", r_colon(c), ve);
        buf_free(&t);
        names[n] = nm;
        lens[n] = ln;
        vals[n] = mk_rule_buf(c, &kv);
        reqd[n] = rq;
        if (rq) n_req++;
        n++;
    }
    /* extra members */
    struct buf xb = {0};
    const char *cl = r_colon(c);
    bool ppat_any = s->n_ppat > 0 && !s->addl;
    for (int j = 0; j < s->n_ppat; j++) {
        struct sn *r = js_resolve(c, s->ppsch[j]);
        if (!r) return NULL;
        if (!sn_is_any(r)) ppat_any = false;
    }
    /* one pattern and no declared names: other keys are the pattern's complement (when we can
     * write it) and take additionalProperties */
    struct sn *addl_r = s->addl ? js_resolve(c, s->addl) : NULL;
    if (s->addl && !addl_r) return NULL;
    bool addl_false = addl_r && sn_unsat(addl_r);
    struct buf compl = {0};
    const char *compl_rule = NULL;
    if (s->n_ppat == 1 && !ppat_any && n_all == 0 && !addl_false &&
        !universal_pattern(s->ppat[0])) {
        struct err save = *c->e;
        buf_puts(&compl, "\"");
        if (jsrx_pattern_complement(s->ppat[0], strlen(s->ppat[0]), &compl, c->e)) {
            *c->e = save; /* not expressible: the errors below explain */
        } else {
            buf_puts(&compl, "\"");
            compl_rule = mk_regex_rule(c, compl .data);
        }
        buf_free(&compl );
    }
    /* the single-pattern forms above have direct regexes; every other combination of
     * patterns, declared names and additionalProperties goes through the key automaton */
    bool general = false;
    if (s->n_ppat && !ppat_any && !compl_rule) {
        bool univ0 = s->n_ppat == 1 && universal_pattern(s->ppat[0]);
        bool names_clear = true;
        for (int j = 0; s->n_ppat == 1 && !univ0 && j < n_all; j++) {
            int m = js_pattern_matches(s->ppat[0], all_names[j], all_lens[j]);
            if (m < 0) {
                err_set(c->e, ERR_INVALID, "patternProperties: bad pattern /%.100s/", s->ppat[0]);
                return NULL;
            }
            if (m) names_clear = false;
        }
        general = !(s->n_ppat == 1 && (univ0 || (addl_false && names_clear)));
    }
    if (general) {
        if (emit_keys_general(c, s, all_names, all_lens, n_all, &xb)) {
            buf_free(&xb);
            return NULL;
        }
    } else if (s->n_ppat && !ppat_any) {
        const char *pv = js_emit(c, s->ppsch[0]);
        if (!pv && c->e->msg[0]) return NULL;
        if (pv) {
            struct buf key = {0};
            if (universal_pattern(s->ppat[0])) {
                if (jsrx_key_not_in(all_names, all_lens, n_all, &key, c->e)) return NULL;
            } else {
                buf_puts(&key, "\"");
                if (jsrx_pattern(s->ppat[0], strlen(s->ppat[0]), &key, NULL, c->e)) {
                    buf_free(&key);
                    return NULL;
                }
                buf_puts(&key, "\"");
            }
            const char *kr = mk_regex_rule(c, key.data);
            buf_free(&key);
            buf_printf(&xb, "%s %s %s", kr, cl, pv);
        }
        if (compl_rule) {
            const char *av = s->addl ? js_emit(c, s->addl) : r_value(c);
            if (!av && c->e->msg[0]) {
                buf_free(&xb);
                return NULL;
            }
            if (av) buf_printf(&xb, "%s%s %s %s", xb.len ? " | " : "", compl_rule, cl, av);
        }
    } else {
        const char *av = s->addl ? js_emit(c, s->addl) : r_value(c);
        if (!av && c->e->msg[0]) return NULL;
        if (av) {
            struct buf key = {0};
            if (jsrx_key_not_in(all_names, all_lens, n_all, &key, c->e)) return NULL;
            const char *kr = mk_regex_rule(c, key.data);
            buf_free(&key);
            buf_printf(&xb, "%s %s %s", kr, cl, av);
        }
    }
    const char *x = xb.len ? mk_rule_buf(c, &xb) : (buf_free(&xb), NULL);
    if (c->oom) return NULL;
    /* property count bounds */
    int64_t xlo = 0, xhi = x ? -1 : 0;
    int64_t minp = s->min_props, maxp = s->max_props;
    int64_t cnt_lo = 0, cnt_hi = -1;
    bool nonempty = false;
    if (minp > 0 || maxp >= 0) {
        if (n == n_req) {
            if (maxp >= 0 && maxp < n_req) return NULL;
            xlo = minp > n_req ? minp - n_req : 0;
            if (maxp >= 0) xhi = x ? maxp - n_req : 0;
            if (!x && xlo > 0) return NULL;
        } else if (maxp < 0 && minp <= (n_req > 0 ? n_req : 0)) {
            /* already satisfied by the required properties */
        } else if (maxp < 0 && minp == 1) {
            nonempty = true;
        } else if (!x && n <= JS_ANYORDER_MAX) {
            /* no extra member: the any-order sets count the members (below) */
            cnt_lo = minp;
            cnt_hi = maxp;
            if (cnt_lo > n || (cnt_hi >= 0 && cnt_hi < n_req)) return NULL;
        } else {
            err_set(c->e, ERR_UNSUPPORTED,
                    "minProperties/maxProperties are supported only when every property in "
                    "\"properties\" is required, when no other key may appear (at most 8 "
                    "properties), or for minProperties: 1");
            return NULL;
        }
    }
    const char *cm = r_comma(c), *w = r_wso(c);
    /* dependentRequired: both names must be members (an extra key cannot be demanded) */
    int *pair = s->n_deps ? js_alloc(c, (size_t)s->n_deps * 2 * sizeof *pair) : NULL;
    struct deps dp = {pair, 0, cnt_lo, cnt_hi};
    for (int k = 0; k < s->n_deps; k++) {
        int ia = -1, ib = -1;
        for (int i = 0; i < n; i++) {
            if (lens[i] == strlen(s->dep_if[k]) && !memcmp(names[i], s->dep_if[k], lens[i])) ia = i;
            if (lens[i] == strlen(s->dep_then[k]) && !memcmp(names[i], s->dep_then[k], lens[i]))
                ib = i;
        }
        if (ia >= 0 && ia == ib) continue;
        if (ia < 0 || ib < 0 || n > JS_ANYORDER_MAX || xlo != 0 || xhi > 0) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "dependentRequired/dependencies \"%.60s\" -> \"%.60s\": supported when both are "
                    "declared properties of an object with at most %d of them and no "
                    "minProperties/maxProperties on extra members",
                    s->dep_if[k], s->dep_then[k], JS_ANYORDER_MAX);
            return NULL;
        }
        pair[2 * dp.n] = ia;
        pair[2 * dp.n + 1] = ib;
        dp.n++;
    }
    /* (one member with extras is an order question too: extras before it) */
    bool counted = cnt_lo > 0 || cnt_hi >= 0;
    if ((n >= 2 || dp.n || counted || (n == 1 && x && xhi != 0)) && xlo == 0 && xhi <= 0) {
        if (n <= JS_ANYORDER_MAX)
            return emit_object_any_order(c, n, vals, reqd, xhi == 0 ? NULL : x, nonempty, &dp);
        if (n_req <= JS_ANYORDER_REQ_MAX && !dp.n) {
            /* many members: sets of the required ones only; the optional members join the
             * extras (any order, not checked for repetition: see docs "Property order") */
            const char **rv = js_alloc(c, (size_t)(n_req ? n_req : 1) * sizeof *rv);
            bool *rq = js_alloc(c, (size_t)(n_req ? n_req : 1) * sizeof *rq);
            if (c->oom) return NULL;
            struct buf fx = {0};
            int k = 0;
            for (int i = 0; i < n; i++) {
                if (reqd[i]) {
                    rv[k] = vals[i];
                    rq[k++] = true;
                } else
                    buf_printf(&fx, "%s%s", fx.len ? " | " : "", vals[i]);
            }
            if (x && xhi != 0) buf_printf(&fx, "%s%s", fx.len ? " | " : "", x);
            const char *free_m = fx.len ? mk_rule_buf(c, &fx) : (buf_free(&fx), NULL);
            if (c->oom) return NULL;
            return emit_object_any_order(c, n_req, rv, rq, free_m, nonempty, &dp);
        }
        log_warn("jsonschema: an object with %d properties, %d of them required (more than %d), "
                 "keeps their declared order (docs/jsonschema.md \"Property order\")",
                 n, n_req, JS_ANYORDER_REQ_MAX);
    }
    /* rest_i: members i.. each preceded by a comma; first_i: a non-empty run starting at i */
    char *rest_next = NULL; /* rule name or NULL when empty */
    struct buf xt = {0};
    if (x && xhi != 0) {
        if (xhi < 0 && xlo == 0)
            buf_printf(&xt, "(%s %s)*", cm, x);
        else if (xhi < 0)
            buf_printf(&xt, "(%s %s){%lld,}", cm, x, (long long)xlo);
        else
            buf_printf(&xt, "(%s %s){%lld,%lld}", cm, x, (long long)xlo, (long long)xhi);
        rest_next = mk_rule_buf(c, &xt);
    }
    char *first_next = NULL;
    if (x && xhi != 0) {
        struct buf t = {0};
        int64_t lo = xlo > 1 ? xlo - 1 : 0, hi = xhi < 0 ? -1 : xhi - 1;
        if (hi == 0)
            buf_printf(&t, "%s", x);
        else if (hi < 0 && lo == 0)
            buf_printf(&t, "%s (%s %s)*", x, cm, x);
        else if (hi < 0)
            buf_printf(&t, "%s (%s %s){%lld,}", x, cm, x, (long long)lo);
        else
            buf_printf(&t, "%s (%s %s){%lld,%lld}", x, cm, x, (long long)lo, (long long)hi);
        first_next = mk_rule_buf(c, &t);
    }
    bool extras_required = xlo > 0;
    bool any_req_after = extras_required; /* some required member at index >= i */
    for (int i = n - 1; i >= 0; i--) {
        struct buf rb = {0}, fb = {0};
        if (reqd[i])
            buf_printf(&rb, "%s %s%s%s", cm, vals[i], rest_next ? " " : "",
                       rest_next ? rest_next : "");
        else
            buf_printf(&rb, "(%s %s)?%s%s", cm, vals[i], rest_next ? " " : "",
                       rest_next ? rest_next : "");
        buf_printf(&fb, "%s%s%s", vals[i], rest_next ? " " : "", rest_next ? rest_next : "");
        if (!reqd[i] && first_next) buf_printf(&fb, " | %s", first_next);
        if (reqd[i]) any_req_after = true;
        rest_next = mk_rule_buf(c, &rb);
        first_next = mk_rule_buf(c, &fb);
        if (c->oom) return NULL;
    }
    struct buf ob = {0};
    bool empty_ok = !any_req_after && !nonempty;
    if (empty_ok) buf_printf(&ob, "\"{\" %s \"}\"", w);
    if (first_next)
        buf_printf(&ob, "%s\"{\" %s %s %s \"}\"", empty_ok ? " | " : "", w, first_next, w);
    if (!ob.len) return NULL;
    return mk_rule_buf(c, &ob);
}

char *js_emit(struct js *c, struct sn *s)
{
    if (c->oom) return NULL;
    if (s->ref) {
        struct def *d = js_find_def(c, s->ref);
        if (!d->name) {
            d->name = mk_rule(c, NULL);
            if (!d->name) return NULL;
        }
        return d->name;
    }
    if (s->n_alts) {
        struct buf b = {0};
        int n = 0;
        char *last = NULL;
        for (int i = 0; i < s->n_alts; i++) {
            char *a = js_emit(c, s->alts[i]);
            if (a) last = a;
            if (!a) {
                if (c->e->msg[0]) {
                    buf_free(&b);
                    return NULL;
                }
                continue;
            }
            buf_printf(&b, "%s%s", n++ ? " | " : "", a);
        }
        if (!n) {
            buf_free(&b);
            return NULL;
        }
        if (n == 1) {
            buf_free(&b);
            return last;
        }
        return mk_rule_buf(c, &b);
    }
    if (s->enumv) return emit_enum(c, s);
    if (sn_is_any(s)) return (char *)r_value(c);
    struct buf b = {0};
    int n = 0;
    char *a = NULL;
#define ALT(expr)                                                                                  \
    do {                                                                                           \
        a = (expr);                                                                                \
        if (a)                                                                                     \
            buf_printf(&b, "%s%s", n++ ? " | " : "", a);                                           \
        else if (c->e->msg[0])                                                                     \
            goto fail;                                                                             \
    } while (0)
    if (s->not_enum) { /* excluded values we can only express for strings, booleans, null */
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x)
        {
            unsigned need = json_is_number(x)   ? (JT_NUM | JT_INT)
                            : json_is_array(x)  ? JT_ARR
                            : json_is_object(x) ? JT_OBJ
                                                : 0;
            if (json_is_integer(x) ||
                (json_is_real(x) && json_real_value(x) == floor(json_real_value(x))))
                need = JT_NUM | JT_INT;
            else if (json_is_real(x))
                need = JT_NUM;
            if (s->types & need) {
                err_set(c->e, ERR_UNSUPPORTED,
                        "unsupported keyword \"not\" (excluding a number, array or object value)");
                goto fail;
            }
        }
    }
    if (s->types & JT_OBJ) ALT(emit_object(c, s));
    if (s->types & JT_ARR) ALT(emit_array(c, s));
    if (s->types & JT_STR) ALT(emit_string(c, s));
    if (s->types & (JT_NUM | JT_INT)) ALT(emit_number(c, s, !(s->types & JT_NUM)));
    if (s->types & JT_BOOL) {
        bool t = !not_has(s, json_true()), f = !not_has(s, json_false());
        if (t || f) ALT(t && f ? "\"true\" | \"false\"" : t ? "\"true\"" : "\"false\"");
    }
    if ((s->types & JT_NULL) && !not_has(s, json_null())) ALT("\"null\"");
#undef ALT
    if (!n) {
        buf_free(&b);
        return NULL;
    }
    if (n == 1 && a && !strchr(a, ' ')) { /* a single rule name: no wrapper rule */
        buf_free(&b);
        return a;
    }
    return mk_rule_buf(c, &b);
fail:
    buf_free(&b);
    return NULL;
}

